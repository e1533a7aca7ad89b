"""Concepts with one owner beyond the shared vocabulary's words (tests/unit/test_vocabulary.py): a property key's
text lives only in wapflow.lakehouse.model, a shown-only status (interrupted, discarded) or a delivery's state
(sent) only in wapflow.vocabulary, and every alert event has exactly one title there. A second spelling of one of
these anywhere in src/wapflow fails here, naming file and line."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from wapflow import vocabulary as V

SRC = Path(__file__).resolve().parents[2] / "src" / "wapflow"
MODEL = SRC / "lakehouse" / "model.py"
# Words that are nothing but a shown-only status or a delivery state: a literal of one elsewhere is a second owner.
OWNED_WORDS = frozenset({V.INTERRUPTED, V.DISCARDED, V.DELIVERY_SENT})


def property_keys(model: Path = MODEL) -> dict[str, str]:
    """The property keys wapflow.lakehouse.model names (text -> constant): every upper-case constant holding a
    dotted or dashed string, or a tuple of them."""
    keys: dict[str, str] = {}
    for stmt in ast.parse(model.read_text()).body:
        if not isinstance(stmt, ast.Assign) or not all(
            isinstance(t, ast.Name) and t.id.isupper() for t in stmt.targets
        ):
            continue
        name = ast.unparse(stmt.targets[0])
        value = stmt.value
        texts = [value] if isinstance(value, ast.Constant) else getattr(value, "elts", [])
        for t in texts:
            if isinstance(t, ast.Constant) and isinstance(t.value, str) and ("." in t.value or "-" in t.value):
                keys[t.value] = name
    return keys


def _literals(tree: ast.Module) -> Iterator[ast.Constant]:
    """String literals that are code, not docstrings, nor a dict's keys (a rendering table keyed by status)."""
    skip = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    skip |= {id(k) for n in ast.walk(tree) if isinstance(n, ast.Dict) for k in n.keys if k is not None}
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip:
            yield n


def scan(root: Path = SRC, model: Path = MODEL) -> list[str]:
    keys = property_keys(model)
    prefixes = [k for k in keys if k.endswith(".")]
    found = []
    for path in sorted(root.rglob("*.py")):
        if path in (model, root / "vocabulary.py"):
            continue
        for lit in _literals(ast.parse(path.read_text(), filename=str(path))):
            where = f"{path.relative_to(root.parent)}:{lit.lineno}"
            text = lit.value
            if text in keys or any(text.startswith(p) for p in prefixes):
                owner = keys.get(text) or next(keys[p] for p in prefixes if text.startswith(p))
                found.append(f"{where}: {text!r} is lakehouse.model.{owner}")
            elif text in OWNED_WORDS:
                found.append(f"{where}: {text!r} is wapflow.vocabulary's")
    return found


def test_property_keys_statuses_and_delivery_states_have_one_owner():
    found = scan()
    assert not found, "spelt again outside its owner (import it from there):\n" + "\n".join(found)


def test_the_scan_finds_a_second_spelling_and_passes_uses(tmp_path):
    pkg = tmp_path / "wapflow"
    (pkg / "lakehouse").mkdir(parents=True)
    model = pkg / "lakehouse" / "model.py"
    model.write_text('RUN_ID_PROP = "wapflow.run-id"\nPREFIX = "wapflow.input."\nMODE = ("write.merge.mode",)\n')
    (pkg / "uses.py").write_text(
        '"""A docstring may say wapflow.run-id."""\n'
        'COLORS = {"interrupted": "purple"}\n'
        "def f(summary, rec):\n"
        '    a = summary.get("wapflow.run-id")\n'
        '    b = "wapflow.input.raw.trips"\n'
        '    c = {"write.merge.mode": "x"}\n'
        '    rec.status = "discarded"\n'
        '    return rec.delivery == "sent"\n'
    )
    found = scan(pkg, model)
    assert sorted(int(f.split(":")[1]) for f in found) == [4, 5, 7, 8], found


def test_every_alert_event_has_one_title():
    assert set(V.ALERT_TITLES) == {*V.ALERT_EVENTS, V.TEST_ALERT_EVENT}
    assert all(t and t[0].isupper() for t in V.ALERT_TITLES.values())
