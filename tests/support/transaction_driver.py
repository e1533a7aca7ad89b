"""Transactions one after the other, each with its own run id, in a process of its own, to be SIGKILLed
(tests/process/test_transaction_kill.py).

    python transaction_driver.py CONFIG LAST

Transaction k (run id tx<k>) writes raw rows to k.raw, their positive fares to k.silver through `tx.sql` over
raw as staged, and silver's total to k.gold through `tx.sql` over silver as staged; leaving the block publishes
the three tables in one commit. A driver started after a kill first runs again the last transaction an earlier
life saw end (it must publish nothing and report that outcome again: "again" line), then the one the kill
interrupted, under the same run id, then the rest up to LAST. It knows where it is from its own output lines,
which the test keeps in CONFIG's folder (driver.log), and prints:

    life <pid> from tx<k>
    tx<k> block / tx<k> wrote raw / tx<k> wrote silver / tx<k> finish
    tx<k> done <status> <published_via,...> <snapshot ids> | tx<k> again <status> <published_via,...> <snapshot ids>
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import wapflow

DONE = re.compile(r"^tx(\d+) (?:done|again) (\w+)")


def raw_rows(k: int) -> list[tuple[int, int, float]]:
    """Five rows with fares -1, 0, 1, 2, 3 (silver keeps the three positive ones)."""
    return [(k * 100 + j, k, j - 1.0) for j in range(5)]


def transaction(lh: Any, k: int) -> Any:
    spark = lh.spark
    with wapflow.transaction(lh, run_id=f"tx{k}") as tx:
        print(f"tx{k} block", flush=True)
        tx.write("k.raw", spark.createDataFrame(raw_rows(k), "id long, grp long, fare double"))
        print(f"tx{k} wrote raw", flush=True)
        tx.write("k.silver", tx.sql(f"SELECT id, grp, fare FROM k.raw WHERE grp = {k} AND fare > 0"))
        print(f"tx{k} wrote silver", flush=True)
        gold = tx.sql(f"SELECT grp, count(*) AS trips, sum(fare) AS fare FROM k.silver WHERE grp = {k} GROUP BY grp")
        tx.write("k.gold", gold)
        print(f"tx{k} finish", flush=True)
    return tx.result


def main(config: str, last: int) -> int:
    log = Path(config).parent / "driver.log"
    ended = [int(m.group(1)) for ln in log.read_text().splitlines() if (m := DONE.match(ln))] if log.exists() else []
    start = max(ended, default=1)
    print(f"life {os.getpid()} from tx{start}", flush=True)
    lh = wapflow.connect(config)
    for k in range(start, last + 1):
        res = transaction(lh, k)
        word = "again" if k in ended else "done"
        via = ",".join(sorted({str(t.published_via) for t in res.tables}))
        snaps = ",".join(str(t.snapshot_id) for t in res.tables)
        print(f"tx{k} {word} {res.status} {via} {snaps}", flush=True)
        if res.status != "published":
            print(res.message, flush=True)
            return res.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
