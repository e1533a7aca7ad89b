"""A run as data: everything a later step, a replay or another process needs, in one JSON value.

The steps (wapflow.pipeline.steps) are functions RunState -> RunState. A durable executor stores the
value between steps (`to_json`), a retried step starts again from the value it was given, and nothing
a step needs lives only in one process: Spark DataFrames, open file links and the audit plan are
rebuilt from this value and the configuration by the step that needs them.
"""

from __future__ import annotations

import base64
import json
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, Literal

from wapflow.audit.report import AuditReport, CheckResult
from wapflow.lakehouse.tables import Snapshot
from wapflow.runs.store import RunRecord

# A run's outcome as people and exit codes see it; "running" until publish (or a failure) ends it.
Status = Literal["running", "published", "blocked", "failed"]
# The steps, in order; RunState.done lists the ones that completed.
Step = Literal["prepare", "write", "audit", "publish"]
STEPS: tuple[Step, ...] = ("prepare", "write", "audit", "publish")

STATE_VERSION = 1


@dataclass(frozen=True)
class RunState:
    """One run of one table. Every field is plain JSON data (see to_json)."""

    run_id: str
    table: str  # as the caller named it; validated by prepare
    patterns: list[str]  # the files, globs or URIs the caller named
    branch: str | None = None  # chosen by prepare when None (wap_<run_id>)
    extra_checks: list[dict[str, Any]] = field(default_factory=list)  # checks added by the caller (CLI/API)
    record: dict[str, Any] = field(default_factory=dict)  # the run store's row (RunRecord), as JSON data
    done: list[str] = field(default_factory=list)  # completed steps
    # prepare
    sources: list[dict[str, Any]] = field(default_factory=list)  # FileIdentity of each file read
    skipped: list[dict[str, str]] = field(default_factory=list)  # bookkeeping files not read
    skipped_note: str | None = None
    fmt: str | None = None
    record_owned: bool = True  # False when the run id's record belongs to another attempt
    already_published: int | None = None  # main's snapshot that carries this run already
    # write
    base: int | None = None  # main's snapshot the branch started from
    run_snapshots: list[dict[str, Any]] = field(default_factory=list)  # the run's snapshots on its branch
    q_base: int | None = None
    q_snapshots: list[dict[str, Any]] = field(default_factory=list)  # ... on the quarantine table's branch
    staging: str | None = None  # add_columns: the staging table holding the batch
    schema_changes: list[str] = field(default_factory=list)
    created_table: bool = False
    opened_branch: bool = False  # Nessie: this run created its catalog branch
    observed: dict[str, Any] | None = None  # audit metrics computed by the write job itself
    # audit
    report: dict[str, Any] | None = None
    main_heads: dict[str, int | None] = field(default_factory=dict)  # main as read by main-dependent checks
    # publish
    published_via: str | None = None  # fast_forward | cherry_pick | merge | merge_reapplied | already
    message: str = ""

    @property
    def status(self) -> str:
        return str(self.record.get("status", "running"))

    def evolve(self, **changes: Any) -> RunState:
        return replace(self, **changes)

    # --- JSON ---------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["observed"] = None if self.observed is None else {k: _tag(v) for k, v in self.observed.items()}
        return {"version": STATE_VERSION, **json.loads(json.dumps(d, default=_default))}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunState:
        if d.get("version") != STATE_VERSION:
            raise ValueError(f"run state version {d.get('version')!r} is not {STATE_VERSION}")
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        if kw.get("observed") is not None:
            kw["observed"] = {k: _untag(v) for k, v in kw["observed"].items()}
        if kw.get("main_heads"):
            kw["main_heads"] = {k: (None if v is None else int(v)) for k, v in kw["main_heads"].items()}
        return cls(**kw)

    @classmethod
    def from_json(cls, text: str) -> RunState:
        return cls.from_dict(json.loads(text))


# --- the typed values inside a state ------------------------------------------------------------


def record_to_data(rec: RunRecord) -> dict[str, Any]:
    d = asdict(rec)
    d["started_at"] = rec.started_at.isoformat()
    d["finished_at"] = rec.finished_at.isoformat() if rec.finished_at else None
    data: dict[str, Any] = json.loads(json.dumps(d, default=str))
    return data


def record_from_data(d: dict[str, Any]) -> RunRecord:
    kw = dict(d)
    kw["started_at"] = _when(kw.get("started_at")) or datetime.now(UTC)
    kw["finished_at"] = _when(kw.get("finished_at"))
    return RunRecord(**kw)


def snapshot_to_data(s: Snapshot) -> dict[str, Any]:
    return {
        "snapshot_id": s.snapshot_id,
        "parent_id": s.parent_id,
        "committed_at": s.committed_at.isoformat(),
        "operation": s.operation,
        "summary": dict(s.summary),
    }


def snapshot_from_data(d: dict[str, Any]) -> Snapshot:
    return Snapshot(
        snapshot_id=int(d["snapshot_id"]),
        parent_id=None if d.get("parent_id") is None else int(d["parent_id"]),
        committed_at=_when(d["committed_at"]) or datetime.now(UTC),
        operation=d.get("operation"),
        summary={str(k): str(v) for k, v in (d.get("summary") or {}).items()},
    )


def report_to_data(r: AuditReport) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(json.dumps(asdict(r), default=str))
    return data


def report_from_data(d: dict[str, Any]) -> AuditReport:
    return AuditReport(
        rows=int(d["rows"]),
        checks=[CheckResult(**c) for c in d.get("checks", [])],
        quarantined_rows=int(d.get("quarantined_rows") or 0),
        schema_changes=list(d.get("schema_changes") or []),
    )


def _when(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def _default(v: object) -> object:
    if isinstance(v, datetime | date):
        return v.isoformat()
    if isinstance(v, Decimal):
        return str(v)
    raise TypeError(f"{type(v).__name__} is not part of a run state")


# Observed metrics are counts and column maxima (freshness): keep their Python types across JSON.
def _tag(v: object) -> object:
    if v is None or isinstance(v, bool | int | float | str):
        return v
    if isinstance(v, datetime):
        return {"$datetime": v.isoformat()}
    if isinstance(v, date):
        return {"$date": v.isoformat()}
    if isinstance(v, Decimal):
        return {"$decimal": str(v)}
    if isinstance(v, bytes | bytearray):
        return {"$bytes": base64.b64encode(bytes(v)).decode()}
    return {"$str": str(v)}


def _untag(v: object) -> object:
    if not isinstance(v, dict):
        return v
    ((tag, text),) = v.items()
    if tag == "$datetime":
        return datetime.fromisoformat(text)
    if tag == "$date":
        return date.fromisoformat(text)
    if tag == "$decimal":
        return Decimal(text)
    if tag == "$bytes":
        return base64.b64decode(text)
    return text
