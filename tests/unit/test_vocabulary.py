"""The shared vocabulary has one owner, wapflow.vocabulary: a word defined a second time elsewhere fails here.

Definitions are what count, not uses: an Enum member, a Literal[...] listing a status, state or event, a module
or class constant holding one (or a tuple or set of them), a duration regex or unit table, a name built like a
run's branch. Comparisons, dict keys in rendering and function-local values are uses and pass.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from wapflow import vocabulary as V

SRC = Path(__file__).resolve().parents[2] / "src" / "wapflow"
OWNER = SRC / "vocabulary.py"
# The units a duration grammar is made of; a regex alternation or a dict naming three of them is one.
UNIT_WORDS = frozenset({"ms", "s", "sec", "secs", "m", "min", "mins", "h", "hr", "hrs", "d", "w"})
_GROUP = re.compile(r"\(([^()]*)\)")
_RE_FUNCS = frozenset({"compile", "match", "fullmatch", "search", "findall", "finditer", "split", "sub"})


def _strings(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _is_literal(node: ast.expr) -> bool:
    """Literal[...] or typing.Literal[...]."""
    if not isinstance(node, ast.Subscript):
        return False
    v = node.value
    return (isinstance(v, ast.Name) and v.id == "Literal") or (isinstance(v, ast.Attribute) and v.attr == "Literal")


def _collection(node: ast.expr) -> list[str] | None:
    """The strings of a tuple, list or set display, or of frozenset/set/tuple(...) of one; else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("frozenset", "set", "tuple"):
        return _collection(node.args[0]) if len(node.args) == 1 else None
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return None


def _lists_terms(strings: list[str]) -> bool:
    """A Literal of statuses, states or events: two of the words or more, or nothing else (a step's outcomes
    that end in one are another thing)."""
    hits = set(strings) & V.TERMS
    return len(hits) >= 2 or (bool(hits) and set(strings) <= V.TERMS)


def _duration_regex(pattern: str) -> bool:
    for group in _GROUP.findall(pattern):
        alternatives = set(group.removeprefix("?:").split("|"))
        if len(alternatives & UNIT_WORDS) >= 3:
            return True
    return False


def _unit_table(node: ast.expr) -> bool:
    if not isinstance(node, ast.Dict):
        return False
    keys = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    return len(keys & UNIT_WORDS) >= 3


def _branch_name(node: ast.JoinedStr) -> bool:
    """f"wap_{...}" (a run's branch) or f"...__wap_{...}" / f"...__quarantine" (the tables wapflow names)."""
    parts = node.values
    head = parts[0] if parts else None
    if isinstance(head, ast.Constant) and head.value == V.RUN_BRANCH_PREFIX and len(parts) == 2:
        return True
    texts = [p.value for p in parts if isinstance(p, ast.Constant) and isinstance(p.value, str)]
    return any(V.STAGING_INFIX in t or V.QUARANTINE_SUFFIX in t for t in texts)


def _definitions(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """(line, what) of each vocabulary definition in a module."""
    # Module and class bodies: constants, type aliases, Enum members.
    bodies: list[tuple[list[ast.stmt], bool]] = [(tree.body, False)]
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            enum = any(isinstance(b, (ast.Name, ast.Attribute)) and "Enum" in ast.unparse(b) for b in node.bases)
            bodies.append((node.body, enum))
    for body, enum in bodies:
        for stmt in body:
            if isinstance(stmt, ast.Assign):
                value, names = stmt.value, [ast.unparse(t) for t in stmt.targets]
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                value, names = stmt.value, [ast.unparse(stmt.target)]
            else:
                continue
            name = ", ".join(names)
            if isinstance(value, ast.Constant) and value.value in V.TERMS:
                if enum or all(n.isupper() for n in names):
                    yield stmt.lineno, f"{name} = {value.value!r}"
            elif (
                isinstance(value, ast.Constant)
                and isinstance(value.value, str)
                and value.value.startswith(V.RUN_BRANCH_PREFIX)
                and "BRANCH" in name
            ):
                yield stmt.lineno, f"{name} = {value.value!r}: a branch name"
            elif (strings := _collection(value)) and set(strings) <= V.TERMS:  # a subset of the words
                yield stmt.lineno, f"{name} = {sorted(set(strings) & V.TERMS)}"
            elif _unit_table(value):
                yield stmt.lineno, f"{name}: a table of duration units"
    # Anywhere: Literal[...] naming a word, duration regexes, branch names built by hand.
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_literal(node):
            if _lists_terms(words := _strings(node.slice)):
                yield node.lineno, f"Literal{sorted(set(words) & V.TERMS)}"
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "re"
            and node.func.attr in _RE_FUNCS
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and _duration_regex(node.args[0].value)
        ):
            yield node.lineno, f"a duration grammar re.{node.func.attr}({node.args[0].value!r})"
        elif isinstance(node, ast.JoinedStr) and _branch_name(node):
            yield node.lineno, f"a name built by hand: {ast.unparse(node)}"


def scan(root: Path = SRC) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        if path == root / OWNER.name:
            continue
        for line, what in _definitions(ast.parse(path.read_text(), filename=str(path))):
            found.append(f"{path.relative_to(root.parent)}:{line}: {what}")
    return found


def test_each_shared_word_is_defined_once_in_wapflow_vocabulary():
    found = scan()
    assert not found, "defined again outside wapflow/vocabulary.py (import it from there):\n" + "\n".join(found)


def test_the_scan_finds_each_kind_of_definition(tmp_path):
    """The scan is not blind: every kind of definition it looks for is caught, every kind of use passes."""
    pkg = tmp_path / "wapflow"
    pkg.mkdir()
    (pkg / "defines.py").write_text(
        "import enum, re\nfrom typing import Literal\n"
        'Status = Literal["running", "published"]\n'
        'HELD = "awaiting_review"\n'
        'DONE = frozenset({"published", "skipped"})\n'
        'UNITS = {"s": 1, "m": 60, "h": 3600}\n'
        'GRAMMAR = re.compile(r"(\\d+)(s|m|h|d)")\n'
        'TEMP_BRANCH = "wap_tmp_"\n'
        "class State(enum.Enum):\n"
        '    PENDING = "pending"\n'
        "def branch(run_id):\n"
        '    return f"wap_{run_id}"\n'
    )
    (pkg / "uses.py").write_text(
        'COLUMNS = ["pid", "running", "memory_mb"]\n'
        'Written = Literal["append", "staged", "blocked"]\n'
        'ORDER = ("running", "failed", "then the rest")\n'
        'COLORS = {"published": "green", "failed": "red"}\n'
        "def show(status):\n"
        '    if status in ("published", "blocked"):\n'
        '        label = "failed"\n'
        '    return f"wap_audit_{status}"\n'
    )
    found = scan(pkg)
    lines = sorted(int(f.split(":")[1]) for f in found if f.startswith("wapflow/defines.py"))
    assert lines == [3, 4, 5, 6, 7, 8, 10, 12], found
    assert not [f for f in found if "uses.py" in f], found


def test_vocabulary_is_a_leaf():
    imported = [
        n.module if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(ast.parse(OWNER.read_text()))
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names
    ]
    assert not [m for m in imported if m and m.startswith("wapflow")], imported


def test_one_duration_grammar_accepts_what_both_old_ones_did():
    for text, seconds in [
        ("90s", 90),
        ("30m", 1800),
        ("1h30m", 5400),
        ("7d", 604800),
        ("2w", 1209600),
        ("15", 15),
        ("500ms", 0.5),
        ("10 min", 600),
        ("5sec", 5),
        ("2H", 7200),
        ("1.5h", 5400),
        (90, 90),
    ]:
        assert V.parse_duration(text) == seconds, text
    for bad in ["7 days", "soon", "", "1h30", "-5s", "m"]:
        try:
            V.parse_duration(bad)
        except ValueError as e:
            assert repr(bad) in str(e) and "not a duration" in str(e)
        else:
            raise AssertionError(f"{bad!r} parsed")
