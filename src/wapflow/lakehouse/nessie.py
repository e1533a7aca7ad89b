"""Catalog-level branches with Project Nessie: a small REST API v2 client and the Nessie branch backend.

A Nessie branch covers every table of the catalog, so a run can write several tables on one branch and
publish them with a single merge (one atomic commit on main), or none. Spark reads and writes a branch
through Iceberg's NessieCatalog (in the Iceberg Spark runtime jar), registered at runtime as one Spark
catalog per Nessie ref. Branch create/merge/delete go through the REST API here, because Nessie's own
Spark SQL extensions have no Spark 4.1 build.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote as urlquote

import httpx

from wapflow.errors import (
    BugError,
    ConfigError,
    EnvironmentProblem,
    NotFound,
    PublishConflict,
    ServiceError,
    Unreachable,
    UsageError,
    WapError,
)
from wapflow.lakehouse.identifiers import TableName, validate_branch, validate_part
from wapflow.lakehouse.nessie_config import TOKEN_ENV, normalize_uri
from wapflow.lakehouse.tables import Tables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from wapflow.config import WapConfig
    from wapflow.lakehouse.branches import BranchInfo

RUN_ID_META = "wapflow.run-id"
TABLES_META = "wapflow.tables"
BRANCH_META = "wapflow.branch"


@dataclass(frozen=True)
class Reference:
    name: str
    type: str
    hash: str


@dataclass(frozen=True)
class Commit:
    hash: str
    parent: str | None
    message: str
    properties: dict[str, str] = field(default_factory=dict)
    committed_at: datetime | None = None
    author: str | None = None
    # Content keys the commit changed (log(..., with_keys=True)), e.g. ["nyc.trips", "nyc.zones"].
    keys: list[str] = field(default_factory=list)

    @property
    def run_id(self) -> str | None:
        return self.properties.get(RUN_ID_META)


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


class NessieClient:
    """Nessie REST API v2: references, merge with an expected hash, commit log. Errors are wapflow errors."""

    def __init__(self, uri: str, token: str | None = None, *, timeout: float = 30.0) -> None:
        self.base = normalize_uri(uri)
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        # The token lives only in this header; it is never part of a message or a repr.
        self._http = httpx.Client(base_url=self.base, headers=headers, timeout=timeout)

    def __repr__(self) -> str:
        return f"NessieClient({self.base!r})"

    def close(self) -> None:
        self._http.close()

    # --- transport --------------------------------------------------------------------------

    def _call(self, method: str, path: str, *, what: str, **kw: Any) -> dict[str, Any]:
        try:
            resp = self._http.request(method, path, **kw)
        except httpx.UnsupportedProtocol:
            raise ConfigError(
                f"{self.base} is not an http(s) URL (while trying to {what})",
                hint="nessie_uri is the server's API base, e.g. http://127.0.0.1:19120/api/v2",
            ) from None
        except httpx.TransportError as e:
            raise Unreachable(
                f"the Nessie server at {self.base} is not reachable ({type(e).__name__}) while trying to {what}",
                hint="start one with `wap nessie up`, or fix [lakehouse].nessie_uri; nothing was written",
            ) from None
        if resp.status_code < 300:
            return resp.json() if resp.content else {}
        body: dict[str, Any] = {}
        with contextlib.suppress(ValueError):
            body = resp.json()
        code = str(body.get("errorCode") or "")
        msg = str(body.get("message") or resp.reason_phrase or "")[:500]
        if resp.status_code in (401, 403):
            raise EnvironmentProblem(
                f"the Nessie server at {self.base} rejected the request to {what} (HTTP {resp.status_code}: "
                "missing, wrong or unauthorized bearer token)",
                hint=f"set [lakehouse].nessie_token or ${TOKEN_ENV}; the token itself is never printed",
            )
        if code == "REFERENCE_NOT_FOUND":
            raise NotFound(f"Nessie: {msg}", hint="list branches with `wap branches`")
        if code == "REFERENCE_ALREADY_EXISTS":
            raise UsageError(f"Nessie: {msg}", hint="pick another --branch, or drop it with `wap discard`")
        if code == "REFERENCE_CONFLICT" or resp.status_code == 409:
            raise PublishConflict(f"Nessie refused to {what}: {msg}{_conflict_details(body)}")
        if resp.status_code == 404:
            raise ConfigError(
                f"{self.base} does not look like a Nessie API v2 endpoint (HTTP 404 while trying to {what})",
                hint="nessie_uri is the server's API base, e.g. http://127.0.0.1:19120/api/v2",
            )
        if resp.status_code >= 500 or resp.status_code == 429:  # a server error, or "too many requests"
            raise ServiceError(
                f"Nessie failed to {what}: HTTP {resp.status_code} {code} {msg}".rstrip(),
                hint="a server error; retry the run (`wap run ... --run-id` resumes it)",
            )
        raise ConfigError(
            f"Nessie refused to {what}: HTTP {resp.status_code} {code} {msg}".rstrip(),
            hint="check [lakehouse].nessie_uri and the names used (branch, table)",
        )

    # --- API --------------------------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        """Also the connectivity/auth check done before any write."""
        cfg = self._call("GET", "/config", what="read its configuration")
        if "defaultBranch" not in cfg:
            raise ConfigError(
                f"{self.base} answered, but not like a Nessie server",
                hint="nessie_uri is the server's API base, e.g. http://127.0.0.1:19120/api/v2",
            )
        return cfg

    def get_reference(self, name: str) -> Reference | None:
        try:
            d = self._call("GET", f"/trees/{urlquote(name, safe='')}", what=f"read reference {name}")
        except NotFound:
            return None
        r = d["reference"]
        return Reference(r["name"], r["type"], r["hash"])

    def references(self) -> list[Reference]:
        out: list[Reference] = []
        token: str | None = None
        while True:
            params: dict[str, Any] = {"max-records": 500}
            if token:
                params["page-token"] = token
            d = self._call("GET", "/trees", what="list references", params=params)
            out += [Reference(r["name"], r["type"], r["hash"]) for r in d.get("references", [])]
            token = d.get("token")
            if not d.get("hasMore") or not token:
                return out

    def create_branch(self, name: str, *, from_ref: str = "main", from_hash: str | None = None) -> Reference:
        validate_branch(name)
        if from_hash is None:
            src = self.get_reference(from_ref)
            if src is None:
                raise NotFound(f"Nessie has no reference {from_ref}")
            from_hash = src.hash
        d = self._call(
            "POST",
            "/trees",
            what=f"create branch {name}",
            params={"name": name, "type": "BRANCH"},
            json={"type": "BRANCH", "name": from_ref, "hash": from_hash},
        )
        r = d["reference"]
        return Reference(r["name"], r["type"], r["hash"])

    def delete_branch(self, name: str, expected_hash: str | None = None) -> bool:
        """False if it did not exist (deleting twice is not an error: crash recovery relies on it)."""
        validate_branch(name)
        if expected_hash is None:
            ref = self.get_reference(name)
            if ref is None:
                return False
            expected_hash = ref.hash
        try:
            self._call("DELETE", f"/trees/{urlquote(name, safe='')}@{expected_hash}", what=f"delete branch {name}")
        except NotFound:
            return False
        return True

    def merge(
        self,
        branch: str,
        *,
        from_hash: str,
        into: str = "main",
        expected_hash: str,
        message: str,
        properties: dict[str, str],
    ) -> str:
        """Merge branch@from_hash into `into`; expected_hash is the target hash the branch was based on,
        so Nessie detects any conflicting change made to main since. Returns main's new hash."""
        body = {
            "fromRefName": branch,
            "fromHash": from_hash,
            "message": message,
            "commitMeta": {"message": message, "properties": properties},
        }
        d = self._call(
            "POST",
            f"/trees/{urlquote(into, safe='')}@{expected_hash}/history/merge",
            what=f"merge {branch} into {into}",
            json=body,
        )
        new = d.get("resultantTargetHash")
        if not new:
            ref = self.get_reference(into)
            assert ref is not None
            new = ref.hash
        return str(new)

    def assign(self, ref: str, *, expected_hash: str, to: Reference) -> None:
        """Move `ref` to `to` if it is still at expected_hash (compare-and-swap: a fast-forward)."""
        self._call(
            "PUT",
            f"/trees/{urlquote(ref, safe='')}@{expected_hash}",
            what=f"move {ref} to {to.name}",
            json={"type": to.type, "name": to.name, "hash": to.hash},
        )

    def no_ancestor_hash(self) -> str:
        """The hash of an empty repository's main (Nessie cannot merge into it, only move it)."""
        if not hasattr(self, "_no_ancestor"):
            self._no_ancestor = str(self.config().get("noAncestorHash", ""))
        return self._no_ancestor

    def log(self, ref: str = "main", *, limit: int = 100, with_keys: bool = False) -> list[Commit]:
        """Newest first; with_keys also fetches which tables each commit changed."""
        out: list[Commit] = []
        token: str | None = None
        while len(out) < limit:
            params: dict[str, Any] = {"max-records": min(limit - len(out), 250)}
            if with_keys:
                params["fetch"] = "ALL"
            if token:
                params["page-token"] = token
            d = self._call(
                "GET", f"/trees/{urlquote(ref, safe='')}/history", what=f"read the log of {ref}", params=params
            )
            for e in d.get("logEntries", []):
                m = e.get("commitMeta", {})
                authors = [a for a in (m.get("authors") or []) if a]
                # API v2 returns multi-valued allProperties; v1-style single values are in properties.
                props = {k: v[0] for k, v in (m.get("allProperties") or {}).items() if v}
                props.update(m.get("properties") or {})
                out.append(
                    Commit(
                        hash=m.get("hash", ""),
                        parent=e.get("parentCommitHash"),
                        message=m.get("message", ""),
                        properties=props,
                        committed_at=_parse_time(m.get("commitTime")),
                        author=authors[0] if authors else None,
                        keys=[".".join(op["key"]["elements"]) for op in (e.get("operations") or []) if op.get("key")],
                    )
                )
            token = d.get("token")
            if not d.get("hasMore") or not token:
                break
        return out[:limit]

    def merge_base(self, branch: str, into: str = "main", *, depth: int = 2000) -> str:
        """Where `branch` forked from `into`: the newest commit of branch's log that is in into's log."""
        on_main = {c.hash for c in self.log(into, limit=depth)}
        root = self.get_reference(into)
        if root is not None:
            on_main.add(root.hash)
        branch_ref = self.get_reference(branch)
        if branch_ref is None:
            raise NotFound(f"Nessie has no branch {branch}")
        if branch_ref.hash in on_main:
            return branch_ref.hash
        for c in self.log(branch, limit=depth):
            if c.parent in on_main:
                return str(c.parent)
        raise PublishConflict(
            f"could not find where branch {branch} forked from {into} within {depth} commits, "
            "so its changes cannot be re-applied",
            hint=f"inspect branch {branch} (`wap branches`), then re-run the files on a fresh branch",
        )


def _conflict_details(body: dict[str, Any]) -> str:
    conflicts = ((body.get("errorDetails") or {}).get("conflicts")) or []
    keys = []
    for c in conflicts:
        key = c.get("key") or {}
        elements = key.get("elements") if isinstance(key, dict) else None
        keys.append(".".join(elements) if elements else str(c.get("message", "")))
    return f" (conflicting: {', '.join(k for k in keys if k)})" if keys else ""


# --- Spark side -------------------------------------------------------------------------------


def branch_catalog_name(catalog: str, branch: str) -> str:
    """A Spark catalog name per Nessie branch: valid as an identifier whatever the branch name."""
    validate_branch(branch)
    digest = hashlib.sha1(branch.encode()).hexdigest()[:10]
    return validate_part(f"{catalog}__nb_{digest}", what="catalog name")


def register_branch_catalog(spark: SparkSession, cfg: WapConfig, branch: str) -> str:
    """Catalogs load lazily by name, so a catalog bound to `ref=branch` can be added to a running session."""
    from wapflow.lakehouse.session import SPARK_CATALOG_CLASS
    from wapflow.lakehouse.session import catalog_properties as base_properties

    name = branch_catalog_name(cfg.lakehouse.catalog_name, branch)
    props = base_properties(cfg)
    props["ref"] = branch
    spark.conf.set(f"spark.sql.catalog.{name}", SPARK_CATALOG_CLASS)
    for k, v in props.items():
        spark.conf.set(f"spark.sql.catalog.{name}.{k}", v)
    return name


@dataclass
class Merged:
    hash: str
    already: bool = False


class NessieBranches:
    """The branch backend for catalog = "nessie": one Nessie branch holds every table a run writes."""

    catalog_level = True

    def __init__(self, cfg: WapConfig, tables: Tables, client: NessieClient) -> None:
        self.cfg = cfg
        self.tables = tables
        self.spark = tables.spark
        self.catalog = tables.catalog
        self.client = client
        self._bases: dict[str, str] = {}
        self._views: dict[str, Tables] = {}

    # --- what the pipeline needs beyond table branches ---------------------------------------

    def tables_for(self, branch: str) -> Tables:
        """The catalog's tables as seen on a Nessie branch (a Spark catalog with ref=branch)."""
        if branch not in self._views:
            self._views[branch] = Tables(self.spark, register_branch_catalog(self.spark, self.cfg, branch))
        return self._views[branch]

    def iceberg_ref(self, branch: str) -> str:
        """On a Nessie branch every table is written on its own Iceberg main."""
        return "main"

    def open(self, branch: str) -> str:
        """Create the Nessie branch from main's current hash unless it exists; returns the fork point."""
        validate_branch(branch)
        if branch in self._bases and self.client.get_reference(branch) is not None:
            return self._bases[branch]
        existing = self.client.get_reference(branch)
        if existing is not None:
            self._bases[branch] = self.client.merge_base(branch)
        else:
            main = self.client.get_reference("main")
            if main is None:
                raise NotFound("the Nessie server has no branch main")
            self.client.create_branch(branch, from_hash=main.hash)
            self._bases[branch] = main.hash
        return self._bases[branch]

    def branch_exists(self, branch: str) -> bool:
        ref = self.client.get_reference(branch)
        return ref is not None and ref.type == "BRANCH"

    def merge(self, branch: str, *, run_id: str, tables: list[TableName]) -> Merged:
        """Publish every table of the branch in one Nessie commit on main."""
        base = self._bases.get(branch) or self.client.merge_base(branch)
        ref = self.client.get_reference(branch)
        if ref is None:
            raise NotFound(f"Nessie has no branch {branch}", hint="the run's rows are gone; re-run its files")
        names = ",".join(t.dotted for t in tables)
        if base == self.client.no_ancestor_hash():
            # First publish into an empty repository: Nessie finds no common ancestor to merge from, so main
            # is moved to the branch instead (still atomic, still conditional on main being untouched).
            try:
                self.client.assign("main", expected_hash=base, to=ref)
            except PublishConflict:
                pass  # main got its first commit meanwhile: merge as usual below
            else:
                return Merged(ref.hash)
        try:
            new = self.client.merge(
                branch,
                from_hash=ref.hash,
                expected_hash=base,
                message=f"wapflow: publish run {run_id} ({names})",
                properties={RUN_ID_META: run_id, TABLES_META: names[:4000], BRANCH_META: branch},
            )
        except PublishConflict as e:
            main = self.client.get_reference("main")
            e.message = (
                f"{e.message}; branch {branch} (forked at {base[:12]}) and main "
                f"(now {main.hash[:12] if main else '?'}) both changed the same table"
            )
            e.hint = (
                f"main is unchanged by this run and branch {branch} is kept; re-run with --run-id {run_id} "
                "to re-apply the audited rows on top of the new main"
            )
            raise
        return Merged(new)

    def delete(self, branch: str) -> bool:
        self._bases.pop(branch, None)
        return self.client.delete_branch(branch)

    # --- BranchBackend ------------------------------------------------------------------------

    def create(self, table: TableName, branch: str) -> int | None:
        """The Nessie branch already holds the table (opened before the write); its head is the base."""
        self.open(branch)
        return self.tables_for(branch).head(table, "main")

    def exists(self, table: TableName, branch: str) -> bool:
        return self.branch_exists(branch) and self.tables_for(branch).exists(table)

    def head(self, table: TableName, branch: str) -> int | None:
        return self.tables_for(branch).head(table, "main")

    def drop(self, table: TableName, branch: str) -> None:
        """Dropping a catalog-level branch drops it for every table of the run."""
        self.delete(branch)

    def write_target(self, table: TableName, branch: str) -> str:
        return self.tables_for(branch).ident(table)

    def fast_forward(self, table: TableName, branch: str) -> int:
        raise BugError(
            "this is a bug in wapflow: a Nessie branch is published by a merge of the whole branch, not per table"
        )

    def cherry_pick(self, table: TableName, snapshot_id: int) -> int:
        raise BugError(
            "this is a bug in wapflow: a Nessie branch is published by a merge of the whole branch, not per table"
        )

    def list(self, table: TableName) -> list[BranchInfo]:
        from wapflow.lakehouse.branches import BranchInfo

        out = []
        main_head = self.tables.head(table, "main") if self.tables.exists(table) else None
        for ref in self.client.references():
            if ref.type != "BRANCH" or ref.name == "main":
                continue
            try:
                validate_branch(ref.name)
            except WapError:
                continue
            view = self.tables_for(ref.name)
            if not view.exists(table):
                continue
            head = view.head(table, "main")
            if head is not None and head != main_head:  # branches that change this table
                out.append(BranchInfo(table, ref.name, head))
        return out

    def list_refs(self) -> builtins.list[Reference]:
        return [r for r in self.client.references() if r.type == "BRANCH" and r.name != "main"]


# --- publish ----------------------------------------------------------------------------------


def _retry_branch(branch: str) -> str:
    return validate_branch(f"{branch[:120]}-reapply")


def publish_branch(lh: Any, branch: str, run_id: str, runs: list[Any]) -> str:
    """Merge the run's branch into main in one Nessie commit, then delete it. `runs`: the WapRuns whose
    tables the branch holds. Returns how: "merge", or "merge_reapplied" when main had changed one of the
    same tables (Nessie refuses such a merge: both sides changed the table's metadata pointer), in which
    case the audited rows are appended again on a fresh branch of the new main and that is merged."""
    backend = lh.branches
    tables = _run_tables(runs)
    try:
        backend.merge(branch, run_id=run_id, tables=tables)
    except PublishConflict as conflict:
        lh.progress(f"main changed {', '.join(t.dotted for t in tables)} since {branch} forked; re-applying the rows")
        _reapply(lh, branch, run_id, runs, conflict)
        return "merge_reapplied"
    backend.delete(branch)
    backend.delete(_retry_branch(branch))
    return "merge"


def _run_tables(runs: list[Any]) -> list[TableName]:
    out: list[TableName] = []
    for r in runs:
        out.append(r.table)
        if r.q_snapshots:
            out.append(r.quarantine)
    return out


def _reapply(lh: Any, branch: str, run_id: str, runs: list[Any], conflict: PublishConflict) -> None:
    """Append each table's audited rows (the run's own snapshots, appends only) to a fresh branch of main."""
    backend = lh.branches
    retry = _retry_branch(branch)
    backend.delete(retry)
    backend.open(retry)
    old, fresh = backend.tables_for(branch), backend.tables_for(retry)
    try:
        for r in runs:
            for table, snaps, base in ((r.table, r.run_snapshots, r.base), (r.quarantine, r.q_snapshots, r.q_base)):
                if not snaps:
                    continue
                if any(s.operation != "append" for s in snaps):
                    raise conflict
                rows = old.read_increment(table, base, snaps[-1].snapshot_id)
                if not fresh.exists(table):  # created by this run; main still lacks it
                    fresh.ensure_namespace(table)
                    fresh.create_like(table, rows)
                r.write_options(rows.writeTo(fresh.ident(table))).append()
        backend.merge(retry, run_id=run_id, tables=_run_tables(runs))
    except Exception:
        backend.delete(retry)
        raise
    backend.delete(retry)
    backend.delete(branch)
