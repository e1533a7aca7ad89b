"""Read-only metadata commands with and without a JVM: `wap history` and `wap branches`, whole processes.

Run from the repo root (`make bench-metadata`):

    .venv/bin/python benchmarks/bench_metadata.py [--dir bench-data/metadata] [--runs 3] [--json]

On the demo's lakehouse (`wap demo --dir DIR`, made on the first run), each command runs as a `wap` process
`--runs` times through each path, the two paths interleaved: table metadata read from the catalog directly
(the default: no JVM) and through Spark (WAP_METADATA=spark, as before). `wap runs` (run store only) is the
anchor. Medians of the wall time per process, the ratio Spark / direct, and whether the --json outputs of
the two paths are identical. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

WAP = str(Path(sys.executable).parent / "wap")
COMMANDS: tuple[tuple[str, ...], ...] = (("history", "nyc.trips"), ("branches",), ("branches", "nyc.trips"))


def run(args: list[str], cwd: Path, **extra: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "WAP_"))} | extra
    t0 = time.perf_counter()
    p = subprocess.run([WAP, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    return time.perf_counter() - t0, p


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="bench-data/metadata", help="where the demo lakehouse is (made if missing)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    opts = ap.parse_args(argv)
    folder = Path(opts.dir).resolve()
    if not (folder / "wap.toml").exists():
        print(f"making the demo lakehouse in {folder} (wap demo)...", file=sys.stderr)
        _, p = run(["demo", "--dir", str(folder), "--rows", "10000", "--json"], Path.cwd())
        if p.returncode != 0:
            print(p.stdout + p.stderr, file=sys.stderr)
            return 1
    results: list[dict[str, Any]] = []
    anchor = [run(["runs", "--json"], folder)[0] for _ in range(opts.runs)]
    for cmd in COMMANDS:
        times: dict[str, list[float]] = {"direct": [], "spark": []}
        outputs: dict[str, set[str]] = {"direct": set(), "spark": set()}
        for _ in range(opts.runs):
            for path, env in (("direct", {}), ("spark", {"WAP_METADATA": "spark"})):
                secs, p = run([*cmd, "--json"], folder, **env)
                if p.returncode != 0:
                    print(f"wap {' '.join(cmd)} ({path}) failed: {p.stderr[-2000:]}", file=sys.stderr)
                    return 1
                times[path].append(secs)
                outputs[path].add(p.stdout)
        direct, spark = statistics.median(times["direct"]), statistics.median(times["spark"])
        results.append(
            {
                "command": "wap " + " ".join(cmd),
                "direct_s": round(direct, 2),
                "spark_s": round(spark, 2),
                "spark_over_direct": round(spark / direct, 1),
                "same_output": outputs["direct"] == outputs["spark"] and len(outputs["direct"]) == 1,
                "runs": opts.runs,
            }
        )
    doc = {"wap_runs_s": round(statistics.median(anchor), 2), "commands": results}
    if opts.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(f"`wap runs` (run store only, the anchor): {doc['wap_runs_s']:.2f} s (median of {opts.runs})")
    print(f"{'command':<26}{'no JVM':>9}{'Spark':>9}{'ratio':>8}  same --json output")
    for r in results:
        print(
            f"{r['command']:<26}{r['direct_s']:>8.2f}s{r['spark_s']:>8.2f}s{r['spark_over_direct']:>7.1f}x"
            f"  {'yes' if r['same_output'] else 'NO'}"
        )
    return 0 if all(r["same_output"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
