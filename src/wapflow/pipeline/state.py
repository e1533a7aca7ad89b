"""A run as data: everything a later step, a replay or another process needs, in one JSON value.

The steps (wapflow.pipeline.driver: prepare, write, audit, publish_step) are functions RunState ->
RunState. A durable executor stores the value between steps (`to_json`), a retried step starts again
from the value it was given, and nothing a step needs lives only in one process: Spark DataFrames, open
file links and the audit plan are rebuilt from this value and the configuration by the step that needs them.

Each field says, in its declaration, how a step sees it (`hydrated`): a run record, file identities,
snapshots, a table name, an audit report. wapflow.pipeline.steps.context.Run is built from these
declarations field by field, so a field added here reaches the steps and back without another list.
"""

from __future__ import annotations

import base64
import copy
import json
import secrets
from collections.abc import Callable
from dataclasses import Field, asdict, dataclass, field, fields, replace
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, Literal

from wapflow.audit.report import AuditReport, CheckResult
from wapflow.config import Check, NotNullCheck
from wapflow.lakehouse.model import Snapshot
from wapflow.runs.store import RunRecord
from wapflow.sql.identifiers import TableName, validate_branch
from wapflow.storage.files import FileIdentity, SkippedFile
from wapflow.vocabulary import AWAITING_REVIEW as AWAITING_REVIEW
from wapflow.vocabulary import HALTED as HALTED
from wapflow.vocabulary import RUN_REJECTED as RUN_REJECTED
from wapflow.vocabulary import run_branch
from wapflow.writing.plan import WriteOutcome

# A run's statuses (HALTED: those at which its steps stop) are wapflow.vocabulary's; imported here for the steps.
# The steps, in order; RunState.done lists the ones that completed.
Step = Literal["prepare", "write", "audit", "publish"]
STEPS: tuple[Step, ...] = ("prepare", "write", "audit", "publish")

STATE_VERSION = 2
# Version 1 called `files` "sources"; from_dict reads it (a state stored by an older wapflow resumes).
_V1_RENAMES = {"sources": "files"}


@dataclass(frozen=True)
class Hydration:
    """How a field's JSON value becomes the typed value a step works with (load), and back (dump)."""

    load: Callable[[Any], Any]
    dump: Callable[[Any], Any]


# A plain JSON field, as it is (Run hydrates a copy of each field, so a step never changes the state it was
# given; the state it returns shares nothing with the step's working values).
_COPY = Hydration(lambda v: v, copy.deepcopy)


def hydration(f: Field[Any]) -> Hydration:
    h: Hydration = f.metadata.get("hydrated", _COPY)
    return h


def _hydrated(load: Callable[[Any], Any], dump: Callable[[Any], Any], *, many: bool = False) -> dict[str, Any]:
    """A field's metadata saying its steps see it typed: one value (None stays None) or a list of them."""
    if many:
        return {"hydrated": Hydration(lambda vs: [load(v) for v in vs], lambda vs: [dump(v) for v in vs])}
    return {"hydrated": Hydration(lambda v: None if v is None else load(v), lambda v: None if v is None else dump(v))}


@dataclass(frozen=True)
class RunState:
    """One run of one table. Every field is plain JSON data (see to_json)."""

    run_id: str
    table: str  # as the caller named it; validated by prepare
    patterns: list[str]  # the files, globs or URIs the caller named
    branch: str | None = None  # chosen by prepare when None (wap_<run_id>)
    extra_checks: list[dict[str, Any]] = field(default_factory=list)  # checks added by the caller (CLI/API)
    source: str | None = None  # the [sources.NAME] whose files these are (its write mode applies), if any
    # The caller's word that a table without checks may publish unaudited (--no-checks; config.audit_consent).
    no_checks: bool = False
    # `wap run` without --again: a file this table published already (the same path, size and version, the
    # ledger's identity) is refused before anything is written (prepare), naming the run that published it.
    once: bool = False
    # The batch is a DataFrame given in this process (wapflow.write, wapflow.transaction), not files:
    # wapflow.pipeline.frames holds it under the run id.
    frame: bool = False
    # A blocked run a person approved (`wap approve` of a blocked run): its checks of these names, history-based
    # (vocabulary.OVERRIDABLE_CHECKS), warn instead of block when audited again; who and why go in the report.
    overridden: list[str] = field(default_factory=list)
    # The rows are on the run's branch already, written there by this engine ("sdp": Spark Declarative
    # Pipelines, wapflow.sdp) on top of `base`: the write step records them instead of writing.
    written_by: str | None = None
    # The write mode and its keys this run sets for its table (config.WRITE_KEYS), over its wap.toml section.
    write_settings: dict[str, Any] = field(default_factory=dict)
    # More properties for every snapshot the run commits (a model's input snapshots), beside the run's own.
    properties: dict[str, str] = field(default_factory=dict)
    # the run store's row, as JSON data
    record: dict[str, Any] = field(
        metadata=_hydrated(lambda d: record_from_data(d), lambda r: record_to_data(r)), default_factory=dict
    )
    done: list[str] = field(default_factory=list)  # completed steps
    # prepare
    # FileIdentity of each file read (the files a run's patterns resolved to; a [sources.NAME] is something else)
    files: list[dict[str, Any]] = field(
        metadata=_hydrated(FileIdentity.from_dict, FileIdentity.to_dict, many=True), default_factory=list
    )
    # bookkeeping files not read (_SUCCESS, .crc)
    skipped: list[dict[str, str]] = field(
        metadata=_hydrated(lambda d: SkippedFile(**d), SkippedFile.to_dict, many=True), default_factory=list
    )
    skipped_note: str | None = None
    fmt: str | None = None
    record_owned: bool = True  # False when the run id's record belongs to another attempt
    already_published: int | None = None  # main's snapshot that carries this run already
    # write
    base: int | None = None  # main's snapshot the branch started from
    # the run's snapshots on its branch
    run_snapshots: list[dict[str, Any]] = field(
        metadata=_hydrated(lambda d: snapshot_from_data(d), lambda x: snapshot_to_data(x), many=True),
        default_factory=list,
    )
    q_base: int | None = None
    # ... on the quarantine table's branch
    q_snapshots: list[dict[str, Any]] = field(
        metadata=_hydrated(lambda d: snapshot_from_data(d), lambda x: snapshot_to_data(x), many=True),
        default_factory=list,
    )
    # add_columns: the staging table holding the batch
    staging: str | None = field(metadata=_hydrated(TableName.parse, lambda t: t.dotted), default=None)
    schema_changes: list[str] = field(default_factory=list)
    created_table: bool = False
    opened_branch: bool = False  # Nessie: this run created its catalog branch
    observed: dict[str, Any] | None = None  # audit metrics computed by the write job itself
    # What the write did (its case, mode, rows, commit): the audit and publish read it, not the write mode.
    # None before the write, and in a state stored by an older wapflow (Run.outcome derives it then).
    write_outcome: dict[str, Any] | None = field(
        metadata=_hydrated(WriteOutcome.from_dict, WriteOutcome.to_dict), default=None
    )
    # audit
    report: dict[str, Any] | None = field(
        metadata=_hydrated(lambda d: report_from_data(d), lambda r: report_to_data(r)), default=None
    )
    main_heads: dict[str, int | None] = field(default_factory=dict)  # main as read by main-dependent checks
    # publish
    published_via: str | None = None  # fast_forward | cherry_pick | merge | merge_reapplied | already
    # merge / replace: times publish found main moved and sent the run back to write on a fresh branch
    reapplied: int = 0
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
        if d.get("version") == 1:
            d = {_V1_RENAMES.get(k, k): v for k, v in d.items()} | {"version": STATE_VERSION}
        if d.get("version") != STATE_VERSION:
            raise ValueError(
                f"run state version {d.get('version')!r} is not one this wapflow reads (1, {STATE_VERSION})"
            )
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


def new_run_id() -> str:
    """Sortable by time, unique across machines, and safe in branch names and SQL."""
    return datetime.now(UTC).strftime("%Y%m%dt%H%M%S") + "_" + secrets.token_hex(3)


def validate_run_id(run_id: str) -> str:
    validate_branch(run_id)
    return run_id


def new_state(
    table: str,
    files: list[str],
    *,
    branch: str | None = None,
    run_id: str | None = None,
    extra_checks: list[Check] | None = None,
    not_null: list[str] | None = None,
    source: str | None = None,
    no_checks: bool = False,
    once: bool = False,
    frame: bool = False,
    write_settings: dict[str, Any] | None = None,
    properties: dict[str, str] | None = None,
) -> RunState:
    """The state of a run nothing has happened to yet (names are validated by prepare). `no_checks`: the
    caller's word that the table may publish without checks if it has none (--no-checks). `once`: refuse files
    the table published already (`wap run` without --again). `frame`: the batch
    is a DataFrame held by wapflow.pipeline.frames (`files` is then empty); `write_settings`: the write mode
    this run sets for its table (mode, key, ...)."""
    rid = validate_run_id(run_id) if run_id else new_run_id()
    checks: list[Check] = list(extra_checks or [])
    checks += [NotNullCheck(check="not_null", column=col) for col in not_null or []]
    rec = RunRecord(run_id=rid, table_name=table, status="running", branch=branch, files=list(files))
    return RunState(
        run_id=rid,
        table=table,
        patterns=list(files),
        branch=branch,
        extra_checks=[c.model_dump(mode="json") for c in checks],
        source=source,
        no_checks=no_checks,
        once=once,
        frame=frame,
        write_settings=dict(write_settings or {}),
        properties=dict(properties or {}),
        record=record_to_data(rec),
    )


# --- the typed values inside a state ------------------------------------------------------------


def record_to_data(rec: RunRecord) -> dict[str, Any]:
    d = asdict(rec)
    d["started_at"] = rec.started_at.isoformat()
    d["finished_at"] = rec.finished_at.isoformat() if rec.finished_at else None
    d["reviewed_at"] = rec.reviewed_at.isoformat() if rec.reviewed_at else None
    data: dict[str, Any] = json.loads(json.dumps(d, default=str))
    return data


def record_from_data(d: dict[str, Any]) -> RunRecord:
    kw = dict(d)
    kw["started_at"] = _when(kw.get("started_at")) or datetime.now(UTC)
    kw["finished_at"] = _when(kw.get("finished_at"))
    kw["reviewed_at"] = _when(kw.get("reviewed_at"))
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
        metrics=list(d.get("metrics") or []),
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


@dataclass(frozen=True)
class GroupState:
    """A run, as data: the tables it writes to one sandbox (`members`, one RunState each) and what the group
    itself carries. Every run is a group: `wap run` is a group of one (its member's run id is the group's), a
    multi-table run, a transaction, models or a pipeline a group of several (members `<run id>-<n>`), published
    together by one publish step (wapflow.pipeline.steps.publish) or not at all.

    A group's status and done steps are its members': every step is applied to all of them, and the outcome
    (published, blocked, awaiting review, failed) is recorded on each."""

    run_id: str
    branch: str
    members: list[RunState] = field(default_factory=list)
    # merge / replace: times publish found main moved and sent the group back to write on fresh branches
    reapplied: int = 0
    # Nessie: the group's write created its catalog branch (a failed write then drops it)
    created_branch: bool = False
    message: str = ""  # the group's outcome in words (a group of one: its member's)
    # A group with no member at all: a transaction whose block wrote nothing ("published", nothing written).
    empty_status: str = "running"

    @property
    def several(self) -> bool:
        """More than one table: published in one atomic commit, its members' records name the group."""
        return len(self.members) > 1 or (bool(self.members) and self.members[0].run_id != self.run_id)

    @property
    def status(self) -> str:
        return self.members[0].status if self.members else self.empty_status

    @property
    def done(self) -> list[str]:
        return list(self.members[0].done) if self.members else ["prepare", "write", "audit", "publish"]

    @classmethod
    def of(cls, state: RunState) -> GroupState:
        """A one-table run as the group of one it is."""
        return cls(
            run_id=state.run_id,
            branch=state.branch or run_branch(state.run_id),
            members=[state],
            reapplied=state.reapplied,
            message=state.message,
        )

    def evolve(self, **changes: Any) -> GroupState:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "group": True,
            "run_id": self.run_id,
            "branch": self.branch,
            "members": [m.to_dict() for m in self.members],
            "reapplied": self.reapplied,
            "created_branch": self.created_branch,
            "message": self.message,
            "empty_status": self.empty_status,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GroupState:
        if not d.get("group"):
            return cls.of(RunState.from_dict(d))  # a one-table run's state
        return cls(
            run_id=str(d["run_id"]),
            branch=str(d["branch"]),
            members=[RunState.from_dict(m) for m in d.get("members") or []],
            reapplied=int(d.get("reapplied") or 0),
            created_branch=bool(d.get("created_branch")),
            message=str(d.get("message") or ""),
            empty_status=str(d.get("empty_status") or "running"),
        )

    @classmethod
    def from_json(cls, text: str) -> GroupState:
        return cls.from_dict(json.loads(text))
