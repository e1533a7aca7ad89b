"""`wapflow.transaction(lh, run_id=...)` SIGKILLed (its JVM with it) in the block, in its publish and after it,
then run again with the same run id: each transaction published exactly once, all three tables together, and a
transaction run again after it published publishes nothing and reports the same outcome. Rows read back by
PyIceberg.

The child is tests/support/transaction_driver.py: transactions tx1, tx2, ... each writing k.raw, k.silver (tx.sql
over raw as staged) and k.gold (tx.sql over silver as staged). Its lives are killed at crash points
(wapflow.faults: the first table's rows on the branch, the group's commit planned, its metadata files written,
main moved) and at a random moment; after each kill the three tables hold the same transactions on main, none
twice. The last life runs to the end.
"""

from __future__ import annotations

import os
import random
import re
import signal
from collections import Counter
from pathlib import Path

import pytest

from support import killable
from support.cli_harness import LazyReader, Reader, write_config
from support.transaction_driver import raw_rows
from wapflow.config import load_config
from wapflow.runs.store import RunStore

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DRIVER = str(Path(__file__).resolve().parents[1] / "support" / "transaction_driver.py")
TABLES = ("k.raw", "k.silver", "k.gold")
LAST = 3  # transactions the driver runs in all
# In the order a transaction passes them: the block (raw's rows on the branch), the commit planned, its metadata
# written (no pointer moved), every main moved (the run store not told yet).
POINTS = ["write:appended", "publish:group-planned", "publish:group-staged", "publish:moved"]
SEED = int(os.environ.get("WAP_TX_KILL_SEED", "46"))
BLOCK_LINE = re.compile(r"^tx\d+ block")
CONFIG = """
[tables."k.raw"]
checks = [{ check = "not_null", column = "id" }]

[tables."k.silver"]
checks = [{ check = "unique", columns = ["id"] }]

[tables."k.gold"]
checks = [{ check = "not_null", column = "grp" }]
"""


def run_driver(cfg: Path, *, kill_after: float | None = None, **extra_env: str) -> tuple[int, list[str]]:
    """One life of the driver, its lines appended to driver.log (which the next life reads to know where it
    is); killed with its JVM `kill_after` seconds after its first block line."""
    return killable.run_driver(
        [DRIVER, str(cfg), str(LAST)],
        kill_after=kill_after,
        start=BLOCK_LINE,
        log=cfg.parent / "driver.log",
        **extra_env,
    )


def on_main(reader: Reader, table: str) -> Counter[str]:
    """The run ids main's snapshots carry, with how often."""
    if not reader.exists(table):
        return Counter()
    return Counter(s["wapflow.run-id"] for s in reader.summaries(table) if "wapflow.run-id" in s)


def transactions_on_main(reader: Reader) -> list[set[int]]:
    """Per table, the transactions on its main; a run id twice on one main fails here."""
    out = []
    for i, t in enumerate(TABLES, start=1):
        ids = on_main(reader, t)
        assert all(n == 1 for n in ids.values()), (t, ids)
        assert all(r.endswith(f"-{i}") for r in ids), (t, ids)  # the table's own member of each transaction
        out.append({int(r.split("-")[0][2:]) for r in ids})
    return out


def test_a_transaction_killed_anywhere_and_run_again_with_its_run_id_publishes_once(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, CONFIG, catalog="txkill")
    reader: Reader = LazyReader(tmp_path, "txkill")  # type: ignore[assignment]
    rng = random.Random(SEED)
    lives: list[tuple[str, int, list[str]]] = []
    kills: list[tuple[str, dict[str, str] | float]] = [(p, {"WAP_CRASH_AT": p}) for p in POINTS]
    kills.append(("random", rng.uniform(0.5, 6.0)))
    for what, how in kills:
        if isinstance(how, dict):
            code, lines = run_driver(cfg, **how)
        else:
            code, lines = run_driver(cfg, kill_after=how)
            what = f"random {how:.2f}s"
        lives.append((what, code, lines))
        assert code in (-signal.SIGKILL, 0), (what, code, lines[-30:])
        assert "Traceback" not in "\n".join(lines), lines[-30:]
        # All or nothing: the three tables hold the same transactions on main, each once.
        per_table = transactions_on_main(reader)
        assert per_table[0] == per_table[1] == per_table[2], (what, per_table)
        if what == "publish:moved":
            # Killed after the commit: the next life runs that transaction again and finds it published.
            moved = max(per_table[0])
        if code == 0:
            break
    code, lines = run_driver(cfg)
    lives.append(("to the end", code, lines))
    summary = [(what, code, [ln for ln in ls if not ln.startswith("life")][-1:]) for what, code, ls in lives]
    assert code == 0, (summary, lines[-40:])

    # Every transaction on every main exactly once (run ids tx<k>-<table's position>), every row of it.
    assert transactions_on_main(reader) == [set(range(1, LAST + 1))] * 3, summary
    raw = [r for k in range(1, LAST + 1) for r in raw_rows(k)]
    assert sorted(r["id"] for r in reader.rows("k.raw")) == sorted(r[0] for r in raw)
    assert sorted(r["id"] for r in reader.rows("k.silver")) == sorted(r[0] for r in raw if r[2] > 0)
    gold = sorted((r["grp"], r["trips"], r["fare"]) for r in reader.rows("k.gold"))
    assert gold == [(k, 3, 6.0) for k in range(1, LAST + 1)], gold
    assert all(reader.branches(t) == [] for t in TABLES), {t: reader.branches(t) for t in TABLES}

    # Run again after it had published (the kill at publish:moved, and each life's first transaction): nothing
    # published again, the earlier outcome reported, with the snapshots main got from the first publish.
    ends: dict[str, list[list[str]]] = {}
    for ln in (cfg.parent / "driver.log").read_text().splitlines():
        if re.match(r"^tx\d+ (done|again) ", ln):
            tx, _, *outcome = ln.split()
            ends.setdefault(tx, []).append(outcome)
    assert sorted(ends) == [f"tx{k}" for k in range(1, LAST + 1)], ends
    assert ["published", "already"] in [o[:2] for o in ends[f"tx{moved}"]], ends  # found published after the kill
    for tx, outcomes in ends.items():
        first = next(o for o in outcomes if o[1] != "already") if tx != f"tx{moved}" else None
        for o in outcomes:
            assert o[0] == "published", (tx, outcomes)
            if first is not None and o is not first:
                assert o == ["published", "already", first[2]], (tx, outcomes)
    # The run store: every table's run of every transaction published, none left running.
    store = RunStore(load_config(str(cfg)).run_store_url())
    for k in range(1, LAST + 1):
        members = [(m.table_name, m.status) for m in store.group(f"tx{k}")]
        assert members == [(t, "published") for t in TABLES], (k, members)
    heads = {t: reader.main(t) for t in TABLES}
    code, lines = run_driver(cfg)  # once more: only the last transaction, again, and nothing moves
    assert code == 0 and any(ln.startswith(f"tx{LAST} again published already") for ln in lines), lines[-20:]
    assert {t: reader.main(t) for t in TABLES} == heads
