"""The shape of the package: no import cycles in wapflow, and the run rows readable without Spark.

A cycle means two modules can only be understood (and loaded) together; the CLI once imported its own
command modules which imported it back. The graph is built from the source with `ast`, counting imports at
module level and inside functions alike (a function-level import is how a cycle hides); only imports under
`if TYPE_CHECKING:` are left out, as they never run.

Module by module, so it also sees a cycle inside one package. Between packages, the import-linter contracts
in pyproject's [tool.importlinter] (`lint-imports`, run by .ci/lint) say more: which package may import
which (layers, counting TYPE_CHECKING imports as well), no cycle between top-level packages, and runtime
code never importing the local dev servers in wapflow._dev.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "wapflow"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: module level, in functions and classes, not under TYPE_CHECKING."""
    found: list[ast.Import | ast.ImportFrom] = []
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return found


def import_graph() -> dict[str, set[str]]:
    """wapflow module -> the wapflow modules it imports (the most specific module each import names)."""
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        targets: set[str] = set()
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                candidates = [a.name for a in node.names]
            else:
                if node.level:  # relative: from the package this module is in (or is)
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    source = ".".join([*base, node.module] if node.module else base)
                else:
                    source = node.module or ""
                # `from pkg import mod` imports the module pkg.mod; `from mod import name` imports mod.
                candidates = [f"{source}.{a.name}" if f"{source}.{a.name}" in files else source for a in node.names]
            for c in candidates:
                while c and c not in files:  # `import wapflow.a.b.c` where only wapflow.a.b is ours
                    c = c.rpartition(".")[0]
                if c and c != name:
                    targets.add(c)
        graph[name] = targets
    return graph


def tangles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components with more than one module: each holds at least one cycle (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def connect(v: str) -> None:  # the package has under 100 modules: recursion depth is no concern
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp: set[str] = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(comp)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def shortest_cycle(graph: dict[str, set[str]], comp: set[str]) -> list[str]:
    """A shortest import path from the component's first module back to itself (breadth-first)."""
    start = min(comp)
    paths = {w: [start, w] for w in sorted(graph[start] & comp)}
    frontier = list(paths)
    while start not in paths:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & comp):
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    nxt.append(w)
        frontier = nxt
    return paths[start]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One concrete cycle per tangle."""
    return [shortest_cycle(graph, comp) for comp in tangles(graph)]


def describe(graph: dict[str, set[str]], comp: set[str]) -> str:
    """The failure line of one tangle: a cycle, and every module caught in it when the cycle is not all of them."""
    cycle = shortest_cycle(graph, comp)
    path = " -> ".join(cycle)
    if len(comp) == len(cycle) - 1:
        return path
    return f"{path}  (tangled together: {', '.join(sorted(comp))})"


def test_the_graph_sees_every_kind_of_import():
    """The graph is only worth its verdict if it sees function-level and relative imports (and cycles)."""
    graph = import_graph()
    assert "wapflow.cli.root" in graph["wapflow.cli"]  # imported inside main() and __getattr__
    assert {"wapflow.cli.demo", "wapflow.cli.nessie", "wapflow.cli.runs"} <= graph["wapflow.cli.root"]
    assert "wapflow.service.tables" in graph["wapflow.cli.tables"]  # imported inside the command functions
    assert "wapflow.runs.store" in graph["wapflow.service.runs"]
    assert "wapflow.pipeline.result" not in graph["wapflow.cli.output"]  # only under TYPE_CHECKING
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_in_wapflow():
    graph = import_graph()
    found = tangles(graph)
    assert not found, "import cycles in wapflow:\n" + "\n".join("  " + describe(graph, c) for c in found)


def test_run_rows_need_no_spark(tmp_path):
    """What a dashboard does: read `wap runs` / `wap report` rows from the run store with pyspark unimportable."""
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.modules["pyspark"] = None  # any `import pyspark...` now raises ImportError
        from datetime import datetime, timezone
        from wapflow.runs.store import RunRecord, RunStore
        from wapflow.service.runs import list_runs, run_report
        from wapflow.errors import NotFound

        store = RunStore("sqlite:///{tmp_path / "runs.db"}")
        store.save(RunRecord("r1", "nyc.trips", "published", files=["a.parquet"], rows_written=10,
                             started_at=datetime(2026, 1, 1, tzinfo=timezone.utc)))
        store.save(RunRecord("r2", "nyc.trips", "blocked", branch="wap_r2", branch_kept=True, rows_written=5,
                             checks=[{{"name": "not_null(x)", "status": "failed"}},
                                     {{"name": "rows", "status": "passed"}}],
                             started_at=datetime(2026, 1, 2, tzinfo=timezone.utc)))
        store.save(RunRecord("r3", "nyc.zones", "failed", error={{"message": "boom", "step": "write"}},
                             started_at=datetime(2026, 1, 3, tzinfo=timezone.utc)))
        rows = list_runs(store, "nyc.trips")
        report = run_report(store, "r2")
        try:
            run_report(store, "r9")
            missing = None
        except NotFound as e:
            missing = str(e)
        print(json.dumps({{
            "rows": rows, "all": [r["run_id"] for r in list_runs(store)], "report": report, "missing": missing,
            "spark_loaded": sorted(m for m in sys.modules if m.startswith("pyspark") and sys.modules[m] is not None),
            "lakehouse_loaded": sorted(m for m in sys.modules if m.startswith("wapflow.lakehouse")),
        }}, default=str))
        """
    )
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    import json

    doc = json.loads(p.stdout)
    assert doc["spark_loaded"] == [] and doc["lakehouse_loaded"] == []
    assert doc["all"] == ["r3", "r2", "r1"]  # newest first
    assert [(r["run_id"], r["status"], r["branch"], r["failed_checks"], r["rows"]) for r in doc["rows"]] == [
        ("r2", "blocked", "wap_r2", ["not_null(x)"], 5),
        ("r1", "published", None, [], 10),
    ]
    assert doc["rows"][1]["started_at"] == "2026-01-01 00:00:00"  # seconds, as `wap runs` shows it
    report = doc["report"]
    assert (report["run_id"], report["table"], report["status"]) == ("r2", "nyc.trips", "blocked")
    assert report["branch_kept"] is True and report["branch"] == "wap_r2" and report["rows_written"] == 5
    assert [c["name"] for c in report["checks"]] == ["not_null(x)", "rows"] and report["resume"] is None
    assert doc["missing"].startswith("no run r9 in the run store")
