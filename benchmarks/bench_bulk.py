"""A large file through one `wap run` process against the PyIceberg peer process: time, peak memory, throughput.

Run from the repo root (jars cached: `wap setup`), on an otherwise idle machine:

    .venv/bin/python benchmarks/bench_bulk.py [--sizes 10000000,100000000] [--peer-max 100000000]
        [--unique] [--workdir bench-data/bulk] [--json]

For each size, one file of trips (generated on the fly, reused while its row count matches; never committed)
is appended to a table that already holds a small seed, as a whole process each:

- `wap run` served by a warm engine, `wap run --no-engine` (its own JVM, `local[2]`), and the served run with
  `adopt_parquet = false` (one `not_null(passenger_count)` check, `--unique` adds `unique(trip_id)`): write to a
  branch, audit, publish; the file's columns are the table's, so the first two adopt it as it is (scanned,
  copied, committed) and the third has Spark rewrite its rows;
- the peer, `ref_pyiceberg_wap.py` (the reference design's process: the file read into Arrow, appended to a
  branch, the NULL count, fast-forward), for sizes up to `--peer-max` (it holds the whole file in memory:
  300M rows do not fit in 24 GB);
- Arrow's own parquet rewrite of the same file with the table's codec (zstd), streamed one row group at a
  time: the machine's limit for reading and writing these rows, printed next to both.

Peak memory is the largest sum of resident memory over the process and its children (the JVM included;
wapflow.engine.runtime.memory_bytes), sampled every 0.2 s. Ratios are wap / peer in one run; seconds on a
shared machine are noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_wap import ensure_file, log, parse_rows  # the benchmarks' shared data files

from wapflow.engine.runtime import memory_bytes

HERE = Path(__file__).resolve().parent
WAP = str(Path(sys.executable).with_name("wap"))
SEED_ROWS = 1_000
CODEC = "zstd"  # Iceberg's and PyIceberg's default parquet codec
# Targets (issue 24): end to end within 1.2x of the peer; memory from 10M to 100M rows at most 1.5x.
PEER_TARGET = 1.2
MEMORY_FLAT_MAX = 1.5


@dataclass
class Side:
    seconds: float
    peak_mb: float
    code: int


@dataclass
class SizeResult:
    rows: int
    file_mb: float
    arrow: Side
    wap: Side  # `wap run` served by a warm engine (the default): no JVM start; the file adopted as it is
    rewrite: Side  # the same with `adopt_parquet = false`: Spark reads and rewrites the rows
    own_jvm: Side  # `wap run --no-engine`: its own JVM
    peer: Side | None

    @property
    def ratio(self) -> float | None:
        return round(self.wap.seconds / self.peer.seconds, 2) if self.peer else None


def measured(cmd: list[str], env: dict[str, str] | None = None, also: tuple[int, ...] = ()) -> Side:
    """Wall time and peak tree memory of one process (and of the process trees `also`: the engine serving
    it); its output only on failure."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, sum(memory_bytes(pid) for pid in (proc.pid, *also)))
            done.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, _ = proc.communicate()
    took = time.perf_counter() - t0
    done.set()
    sampler.join()
    if proc.returncode != 0:
        log(f"  {' '.join(cmd[:3])} ... exited {proc.returncode}: {out[-2000:]}")
    return Side(round(took, 2), round(peak / 2**20, 0), proc.returncode)


def arrow_rewrite(src: Path, dst: Path) -> Side:
    """Arrow reads the file and writes it again with the table's codec, one row group at a time."""
    code = (
        "import sys, pyarrow.parquet as pq\n"
        "f = pq.ParquetFile(sys.argv[1])\n"
        "with pq.ParquetWriter(sys.argv[2], f.schema_arrow, compression=sys.argv[3]) as w:\n"
        "    for i in range(f.num_row_groups):\n"
        "        w.write_table(f.read_row_group(i))\n"
    )
    side = measured([sys.executable, "-c", code, str(src), str(dst), CODEC])
    dst.unlink(missing_ok=True)
    return side


def engine_pids(runtime: Path) -> tuple[int, ...]:
    """The engines started under this runtime folder (wapflow.engine.runtime's records)."""
    return tuple(int(json.loads(f.read_text())["pid"]) for f in (runtime / "wapflow").glob("engine-*.json"))


def wap_config(folder: Path, unique: bool, adopt: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    checks = '{ check = "not_null", column = "passenger_count" }'
    if unique:
        checks += ', { check = "unique", columns = ["trip_id"] }'
    cfg = folder / "wap.toml"
    cfg.write_text(
        f'[lakehouse]\nwarehouse = "{folder / "lakehouse"}"\nmaster = "local[2]"\ndriver_memory = "4g"\n'
        f'\n[tables."bench.trips"]\nchecks = [{checks}]\nadopt_parquet = {str(adopt).lower()}\n'
    )
    return cfg


def measure(rows: int, data: Path, work: Path, *, peer: bool, unique: bool) -> SizeResult:
    file = ensure_file(data, "size", rows)
    seed = ensure_file(data, "warmup", SEED_ROWS)
    size_mb = round(file.stat().st_size / 2**20, 0)
    shutil.rmtree(work, ignore_errors=True)
    log(f"{rows:,} rows ({size_mb:,.0f} MB): Arrow's rewrite ({CODEC})")
    work.mkdir(parents=True)
    arrow = arrow_rewrite(file, work / "arrow.parquet")

    # The engine's runtime folder is the benchmark's own: its engine is found, measured and stopped here.
    env = {**os.environ, "WAP_ENGINE": "auto", "XDG_RUNTIME_DIR": str(work)}
    sides: dict[str, Side] = {}
    for side, flags in (("engine", []), ("rewrite", []), ("own JVM", ["--no-engine"])):
        cfg = wap_config(work / side.replace(" ", "_"), unique, adopt=side != "rewrite")
        seed_run = [WAP, "run", "bench.trips", str(seed), "--config", str(cfg), *flags]
        seeded = subprocess.run(seed_run, env=env, check=False, capture_output=True, text=True)
        if seeded.returncode != 0:
            raise SystemExit(f"seeding the wap table failed: {seeded.stdout}{seeded.stderr}")
        log(f"{rows:,} rows: wap run {' '.join(flags)} ({side})")
        cmd = [WAP, "run", "bench.trips", str(file), "--config", str(cfg), *flags]
        sides[side] = measured(cmd, env, also=() if flags else engine_pids(work))
        if not flags:
            subprocess.run([WAP, "engine", "stop", "--all"], env=env, check=False, capture_output=True)

    peer_side = None
    if peer:
        ref = work / "peer"
        ref.mkdir()
        args = [sys.executable, str(HERE / "ref_pyiceberg_wap.py"), str(ref / "catalog.db"), str(ref), "bench.trips"]
        subprocess.run([*args, str(seed), "--init"], check=True)
        log(f"{rows:,} rows: the PyIceberg peer")
        peer_side = measured([*args, str(file)])
    shutil.rmtree(work, ignore_errors=True)
    return SizeResult(rows, size_mb, arrow, sides["engine"], sides["rewrite"], sides["own JVM"], peer_side)


def report(results: list[SizeResult]) -> tuple[list[str], dict[str, dict[str, object]]]:
    """The table of sides per size and the targets' verdicts."""
    out = [f"\n{'rows':>12}  {'MB':>6}  {'side':>7}  {'seconds':>8}  {'peak MB':>8}  {'M rows/s':>8}  {'vs Arrow':>8}"]
    for r in results:
        sides = (("arrow", r.arrow), ("wap", r.wap), ("rewrite", r.rewrite), ("wap jvm", r.own_jvm), ("peer", r.peer))
        for name, side in sides:
            if side is None:
                out.append(
                    f"{r.rows:>12,}  {r.file_mb:>6,.0f}  {name:>7}  (not run: it holds the whole file in memory)"
                )
                continue
            rate = r.rows / side.seconds / 1e6
            out.append(
                f"{r.rows:>12,}  {r.file_mb:>6,.0f}  {name:>7}  {side.seconds:8.2f}  {side.peak_mb:8,.0f}  "
                f"{rate:8.2f}  {side.seconds / r.arrow.seconds:7.2f}x"
                + ("" if side.code == 0 else f"  exit {side.code}")
            )
    targets: dict[str, dict[str, object]] = {}
    for r in results:
        if r.ratio is not None:
            ok = r.ratio <= PEER_TARGET and r.wap.code == 0
            targets[f"wap_vs_peer_{r.rows}"] = {
                "target": f"<= {PEER_TARGET}x",
                "ratio": r.ratio,
                "status": "PASS" if ok else "MISS",
            }
    if len(results) >= 2:
        small, big = results[0], results[-1]
        growth = round(big.wap.peak_mb / small.wap.peak_mb, 2) if small.wap.peak_mb else None
        targets["wap_memory_flat"] = {
            "target": f"peak at {big.rows:,} <= {MEMORY_FLAT_MAX}x peak at {small.rows:,}",
            "ratio": growth,
            "status": "PASS" if growth is not None and growth <= MEMORY_FLAT_MAX else "MISS",
        }
    out.append("\nSummary")
    out += [f"  {t['status']:<5} {name:<24} ratio {t['ratio']}  target: {t['target']}" for name, t in targets.items()]
    out.append(
        "  wap: `wap run` served by a warm engine (the default; the file is adopted as it is); rewrite: the same with "
        "adopt_parquet = false (Spark rewrites the rows); wap jvm: `wap run --no-engine` (its own JVM, adopted)"
    )
    return out, targets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--sizes", type=parse_rows, default=parse_rows("10000000,100000000"))
    ap.add_argument(
        "--peer-max",
        type=lambda s: parse_rows(s)[0],
        default=100_000_000,
        help="the largest size the peer runs at (it holds the file in memory; default 100000000)",
    )
    ap.add_argument("--unique", action="store_true", help="the wap run also checks unique(trip_id)")
    ap.add_argument("--workdir", default="bench-data/bulk")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    root = Path(a.workdir).resolve()
    t0 = time.perf_counter()
    results = [measure(n, root / "data", root / "run", peer=n <= a.peer_max, unique=a.unique) for n in sorted(a.sizes)]
    out, targets = report(results)
    out.append(f"  (benchmark took {time.perf_counter() - t0:.0f}s on {os.cpu_count()} cores, master local[2])")
    print("\n".join(out))  # noqa: T201 - the benchmark's result
    if a.json:
        print(json.dumps({"sizes": [asdict(r) for r in results], "targets": targets}))  # noqa: T201


if __name__ == "__main__":
    main()
