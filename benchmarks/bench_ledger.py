"""How long listing N known files against the file ledger takes (target: 100,000 files in <= 3 s).

Run from the repo root:

    .venv/bin/python benchmarks/bench_ledger.py [--files 100000] [--json]

What is timed is what `wap ingest` does per pass once the files are known: compute each listed file's
ledger key, read the source's (key, state) pairs in one query, and diff them in memory. The listing itself
(a folder walk or S3 ListObjectsV2 pages) is not part of it: it costs the same with or without a ledger.
Also printed: recording them the first time (one INSERT batch), for scale.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from wapflow.runs.ledger import Ledger, file_key
from wapflow.runs.store import RunStore
from wapflow.storage.files import FileIdentity

TARGET_S = 3.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--files", type=int, default=100_000)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    files = [
        FileIdentity(
            f"s3://landing/trips/2026/{i:07d}.parquet", 1_000_000 + i, f"etag{i:032x}", t0 + timedelta(seconds=i)
        )
        for i in range(args.files)
    ]
    with tempfile.TemporaryDirectory() as d:
        ledger = Ledger(RunStore(f"sqlite:///{Path(d) / 'runs.db'}").engine)
        start = time.perf_counter()
        added = ledger.add("trips", [(file_key("trips", f), f) for f in files])
        record_s = time.perf_counter() - start
        assert added == args.files
        start = time.perf_counter()
        known = ledger.states("trips")
        new = [f for f in files if file_key("trips", f) not in known]
        diff_s = time.perf_counter() - start
        assert not new
    status = "PASS" if diff_s <= TARGET_S else "MISS"
    print(
        f"ledger: {args.files:,} known files listed against the ledger in {diff_s:.2f} s "
        f"(target <= {TARGET_S:.0f} s at 100,000): {status}"
    )  # noqa: T201 - the benchmark's output
    print(f"        recording them the first time: {record_s:.2f} s")  # noqa: T201 - the benchmark's output
    if args.json:
        print(
            json.dumps(
                {"files": args.files, "diff_s": round(diff_s, 3), "record_s": round(record_s, 3), "status": status}
            )
        )  # noqa: T201 - the benchmark's output
    return 0 if status == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
