"""The outer loop's speed: landing -> published with a warm `wap watch`, and batching in `wap ingest`.

Run from the repo root (jars cached: `wap setup`), on an otherwise idle machine:

    .venv/bin/python benchmarks/bench_outer.py [--latency-files 20] [--throughput-files 500] [--json]

1. Latency. A `wap watch` process (real DBOS on SQLite, warm Spark, the folder listed every 0.25 s) and the
   reference design's one-process-per-file PyIceberg WAP (ref_pyiceberg_wap.py: branch, append, NULL
   check, fast-forward) take the same 1,000-row files, alternating which goes first. Watch latency is
   from the rename that lands the file to the moment `main` moved (the catalog's snapshot log), read back
   with PyIceberg; the ledger saying `published` comes just after and is shown too. The reference's is
   from starting its process to `main` moving (and to the process exiting).
2. Throughput. The same small files through `wap ingest` (real processes, JVM start included) with
   batching (max_files_per_run = 100) and with one run per file (max_files_per_run = 1).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from wapflow.demo.generate import write_trips

HERE = Path(__file__).resolve().parent
WAP = [str(Path(sys.executable).with_name("wap"))]
ROWS = 1000


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)  # noqa: T201 - progress


def config(folder: Path, sources: dict[str, tuple[str, Path, int]]) -> Path:
    """wap.toml: embedded lakehouse in `folder`, a not_null check per table, one source per entry."""
    text = (
        f'[lakehouse]\nwarehouse = "{folder / "lakehouse"}"\nmaster = "local[2]"\ndriver_memory = "2g"\n'
        '[lakehouse.spark_conf]\n"spark.sql.shuffle.partitions" = "2"\n\n'
        '[watch]\ninterval = 0.25\nworker = "bench"\nstop_timeout = 60\n\n'
    )
    for name, (table, location, per_run) in sources.items():
        text += (
            f'[tables."{table}"]\nchecks = [{{ check = "not_null", column = "passenger_count" }}]\n\n'
            f'[sources.{name}]\ntable = "{table}"\nlocation = "{location}"\nsettle_seconds = 0\n'
            f"max_files_per_run = {per_run}\n\n"
        )
    cfg = folder / "wap.toml"
    cfg.write_text(text)
    return cfg


def make_files(folder: Path, n: int, first_id: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return [write_trips(folder / f"f{i:04d}.parquet", ROWS, seed=i, start_id=first_id + ROWS * i) for i in range(n)]


def land(src: Path, landing: Path) -> float:
    """Land a file the way uploaders should: written elsewhere, renamed in (atomic). Returns the time."""
    tmp = landing.parent / f".{landing.name}-{src.name}"
    shutil.copyfile(src, tmp)
    os.rename(tmp, landing / src.name)
    return time.time()


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


# --- latency --------------------------------------------------------------------------------------


class Watch:
    def __init__(self, work: Path) -> None:
        from pyiceberg.catalog.sql import SqlCatalog

        from wapflow.runs.ledger import Ledger
        from wapflow.runs.store import RunStore

        self.landing = work / "landing"
        self.landing.mkdir(parents=True)
        self.cfg = config(work, {"trips": ("nyc.trips", self.landing, 100)})
        self.log = (work / "watch.log").open("w")
        self.proc = subprocess.Popen(
            [*WAP, "watch", "trips", "--config", str(self.cfg)], stdout=self.log, stderr=self.log
        )
        lake = work / "lakehouse"
        self.store: Any = None
        self.ledger: Any = None
        self._cat = lambda: SqlCatalog("lakehouse", uri=f"sqlite:///{lake / 'catalog.db'}", warehouse=f"file://{lake}")
        self.Ledger, self.RunStore = Ledger, RunStore

    def _open(self) -> None:
        if self.ledger is None:
            from wapflow.config import load_config

            url = load_config(self.cfg).run_store_url()
            self.store = self.RunStore(url)
            self.ledger = self.Ledger(self.store.engine)

    def wait_published(self, name: str, timeout: float = 120.0) -> Any:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"wap watch exited ({self.proc.returncode}); see {self.log.name}")
            try:
                self._open()
                rows = [r for r in self.ledger.rows("trips") if r.uri.endswith("/" + name)]
            except Exception:  # noqa: BLE001 - the run store does not exist until the worker made it
                rows = []
                self.ledger = None
            if rows and rows[0].state in ("published", "blocked", "failed"):
                if rows[0].state != "published":
                    raise SystemExit(f"{name} ended {rows[0].state}: {rows[0].reason}")
                return rows[0], time.time()
            time.sleep(0.01)
        raise SystemExit(f"{name} not published within {timeout:.0f}s; see {self.log.name}")

    def one(self, src: Path) -> dict[str, float]:
        t0 = land(src, self.landing)
        row, seen = self.wait_published(src.name)
        self.cat = getattr(self, "cat", None) or self._cat()  # the catalog exists once the worker made it
        moved = main_moved(self.cat.load_table("nyc.trips"), row.snapshot_id)
        rec = self.store.get(row.run_id)
        timings = rec.timings if rec else {}
        first = row.first_seen.timestamp()
        started = rec.started_at.timestamp() if rec else first
        return {
            "main_moved": moved - t0,
            "ledger_published": seen - t0,
            "detect": first - t0,
            "queue": started - first,
            **{k: float(v) for k, v in timings.items() if k in ("prepare", "write", "audit", "publish")},
            "settle": row.updated_at.timestamp() - moved,
        }

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(90)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def main_moved(tbl: Any, snapshot_id: int) -> float:
    """When main became `snapshot_id` (the catalog's snapshot log), in seconds since the epoch."""
    times = [e.timestamp_ms for e in tbl.metadata.snapshot_log if e.snapshot_id == snapshot_id]
    if not times:
        raise SystemExit(f"snapshot {snapshot_id} is not in main's history")
    return max(times) / 1000.0


class Reference:
    def __init__(self, work: Path) -> None:
        from pyiceberg.catalog.sql import SqlCatalog

        self.db, self.wh = work / "catalog.db", work / "warehouse"
        self.wh.mkdir(parents=True)
        self.cat = SqlCatalog("ref", uri=f"sqlite:///{self.db}", warehouse=f"file://{self.wh}")

    def _call(self, src: Path, *extra: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, str(HERE / "ref_pyiceberg_wap.py"), str(self.db), str(self.wh), "ref.trips", str(src)]
        return subprocess.run([*cmd, *extra], capture_output=True, text=True, check=False)

    def init(self, src: Path) -> None:
        if self._call(src, "--init").returncode != 0:
            raise SystemExit("the reference could not create its table")

    def one(self, src: Path) -> dict[str, float]:
        t0 = time.time()
        done = self._call(src)
        t1 = time.time()
        if done.returncode != 0:
            raise SystemExit(f"the reference did not publish {src.name}: {done.stderr[-2000:]}")
        tbl = self.cat.load_table("ref.trips")
        snap = tbl.current_snapshot()
        assert snap is not None
        return {"main_moved": main_moved(tbl, snap.snapshot_id) - t0, "process": t1 - t0}


def latency(work: Path, n: int) -> dict[str, Any]:
    files = make_files(work / "data-latency", n + 6, first_id=1)
    log(f"latency: starting `wap watch` (warm Spark, DBOS on SQLite) and the reference, {n} files each")
    watch, ref = Watch(work / "watch"), Reference(work / "ref")
    try:
        ref.init(files[0])
        for f in files[1:6]:  # warm-up, not reported: table creation, class loading, JIT
            watch.one(f)
            ref.one(f)
        ws, rs = [], []
        for i, f in enumerate(files[6:]):
            if i % 2:
                rs.append(ref.one(f))
                ws.append(watch.one(f))
            else:
                ws.append(watch.one(f))
                rs.append(ref.one(f))
            log(f"  file {i + 1}/{n}: watch {ws[-1]['main_moved']:.2f}s  reference {rs[-1]['main_moved']:.2f}s")
    finally:
        watch.stop()
    published = len(watch.cat.load_table("nyc.trips").scan().to_arrow())
    if published != (n + 5) * ROWS:
        raise SystemExit(f"main holds {published} rows, expected {(n + 5) * ROWS}")
    keys = sorted({k for w in ws for k in w})
    return {
        "files": n,
        "rows_per_file": ROWS,
        "watch": {k: {"p50": statistics.median(w[k] for w in ws), "p95": pct([w[k] for w in ws], 0.95)} for k in keys},
        "reference": {
            k: {"p50": statistics.median(r[k] for r in rs), "p95": pct([r[k] for r in rs], 0.95)} for k in rs[0]
        },
        "watch_runs": [round(w["main_moved"], 3) for w in ws],
        "reference_runs": [round(r["main_moved"], 3) for r in rs],
    }


# --- throughput -----------------------------------------------------------------------------------


def ingest(cfg: Path, source: str) -> tuple[float, dict[str, Any]]:
    t0 = time.perf_counter()
    done = subprocess.run(
        [*WAP, "ingest", source, "--config", str(cfg), "--json"], capture_output=True, text=True, check=False
    )
    took = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"wap ingest {source} exited {done.returncode}: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return took, json.loads(done.stdout)


def throughput(work: Path, n: int) -> dict[str, Any]:
    files = make_files(work / "data-throughput", n, first_id=10_000_001)
    sources = {"batched": ("nyc.batched", work / "batched", 100), "single": ("nyc.single", work / "single", 1)}
    for _, folder, _ in sources.values():
        shutil.copytree(work / "data-throughput", folder)
    cfg = config(work, sources)
    out: dict[str, Any] = {"files": n, "rows_per_file": ROWS}
    for name in ("batched", "single"):
        log(f"throughput: `wap ingest {name}` over {n} files (max_files_per_run = {sources[name][2]})")
        took, res = ingest(cfg, name)
        states = {f["state"] for f in res["files"]}
        if states != {"published"} or len(res["files"]) != n:
            raise SystemExit(f"{name}: expected {n} published files, got {res.get('counts')}")
        out[name] = {"seconds": took, "runs": len(res["runs"]), "files_per_s": n / took}
        log(f"  {took:.1f}s, {len(res['runs'])} run(s)")
    out["ratio"] = out["single"]["seconds"] / out["batched"]["seconds"]
    return out


# --- report ---------------------------------------------------------------------------------------


def report(lat: dict[str, Any] | None, thr: dict[str, Any] | None) -> dict[str, Any]:
    targets: dict[str, Any] = {}
    if lat:
        w, r = lat["watch"], lat["reference"]
        print(f"\nLatency, {lat['files']} files of {lat['rows_per_file']:,} rows: landed -> main moved (seconds)")  # noqa: T201
        print(f"  wap watch (warm)         p50 {w['main_moved']['p50']:.2f}  p95 {w['main_moved']['p95']:.2f}")  # noqa: T201
        print(
            f"  reference (process/file) p50 {r['main_moved']['p50']:.2f}  p95 {r['main_moved']['p95']:.2f}"  # noqa: T201
            f"  (process exit p50 {r['process']['p50']:.2f})"
        )
        ratio = r["main_moved"]["p50"] / w["main_moved"]["p50"]
        print(f"  reference / watch at p50: {ratio:.2f}x")  # noqa: T201
        parts = ("detect", "queue", "prepare", "write", "audit", "publish", "settle")
        print("  where watch's time goes (p50 s): " + "  ".join(f"{k} {w[k]['p50']:.2f}" for k in parts if k in w))  # noqa: T201
        print(f"  ledger says published p50 {w['ledger_published']['p50']:.2f}")  # noqa: T201
        targets["latency_p50"] = {
            "target": "<= 0.5 s",
            "value": w["main_moved"]["p50"],
            "status": "PASS" if w["main_moved"]["p50"] <= 0.5 else "MISS",
        }
        targets["latency_vs_reference"] = {
            "target": ">= 2x",
            "value": ratio,
            "status": "PASS" if ratio >= 2 else "MISS",
        }
    if thr:
        print(
            f"\nThroughput, {thr['files']} files of {thr['rows_per_file']:,} rows through `wap ingest` (JVM start included)"
        )  # noqa: T201
        for k in ("batched", "single"):
            v = thr[k]
            print(f"  {k:8s} {v['seconds']:7.1f}s  {v['runs']:4d} runs  {v['files_per_s']:6.1f} files/s")  # noqa: T201
        print(f"  one run per file / batched: {thr['ratio']:.1f}x")  # noqa: T201
        targets["throughput"] = {
            "target": ">= 10x",
            "value": thr["ratio"],
            "status": "PASS" if thr["ratio"] >= 10 else "MISS",
        }
    print("\nSummary")  # noqa: T201
    for k, t in targets.items():
        print(f"  {t['status']:4s}  {k:22s} {t['value']:.2f}  target {t['target']}")  # noqa: T201
    return targets


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--latency-files", type=int, default=20)
    p.add_argument("--throughput-files", type=int, default=500)
    p.add_argument("--skip-latency", action="store_true")
    p.add_argument("--skip-throughput", action="store_true")
    p.add_argument("--workdir", default="bench-data")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    work = Path(args.workdir).resolve() / "outer"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    start = time.time()
    lat = None if args.skip_latency else latency(work / "latency", args.latency_files)
    thr = None if args.skip_throughput else throughput(work / "throughput", args.throughput_files)
    targets = report(lat, thr)
    if args.json:
        print(
            json.dumps(
                {
                    "latency": lat,
                    "throughput": thr,
                    "targets": targets,  # noqa: T201
                    "at": datetime.now().isoformat(timespec="seconds"),
                    "elapsed_s": time.time() - start,
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
