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
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote as urlquote

import httpx

from wapflow.errors import (
    ConfigError,
    NotFound,
    PublishConflict,
    ServiceError,
    Unreachable,
    UsageError,
    WapError,
)
from wapflow.lakehouse.catalog_reads import CatalogReads
from wapflow.lakehouse.lineage import merge_properties, with_properties
from wapflow.lakehouse.metadata import MetadataSource, read_metadata_file
from wapflow.lakehouse.model import RUN_ID_PROP, Snapshot
from wapflow.lakehouse.nessie_config import TOKEN_SETTING, normalize_uri
from wapflow.lakehouse.refs import AuditView, BranchInfo, Discarded, PublishedRun, RunSlice
from wapflow.lakehouse.tables import Tables
from wapflow.spark import errors as spark_errors
from wapflow.sql.identifiers import TableName, validate_branch, validate_part

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructField

    from wapflow.config import WapConfig
    from wapflow.lakehouse.reads import TableMetadata
    from wapflow.storage import Storage


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
        return self.properties.get(RUN_ID_PROP)


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


class NessieClient:
    """Nessie REST API v2: references, merge with an expected hash, commit log. Errors are wapflow errors."""

    def __init__(
        self, uri: str, token: str | None = None, *, timeout: float = 30.0, verify: ssl.SSLContext | bool = True
    ) -> None:
        self.base = normalize_uri(uri)
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        # The token lives only in this header; it is never part of a message or a repr.
        # verify: [lakehouse] ca_bundle's CAs besides the public ones (wapflow.lakehouse.tls).
        self._http = httpx.Client(base_url=self.base, headers=headers, timeout=timeout, verify=verify)

    @classmethod
    def for_config(cls, cfg: WapConfig) -> NessieClient:
        """The client of wap.toml's Nessie: its URI, token and [lakehouse] ca_bundle."""
        from wapflow.lakehouse.nessie_config import nessie_token, nessie_uri
        from wapflow.lakehouse.tls import ssl_context

        return cls(nessie_uri(cfg), nessie_token(cfg), verify=ssl_context(cfg))

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
            untrusted = spark_errors.tls_untrusted(e)
            if untrusted is not None:
                raise spark_errors.untrusted_tls_error(f"the Nessie server at {self.base}", untrusted) from None
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
            raise spark_errors.unauthorised_error(
                f"the Nessie server at {self.base}", TOKEN_SETTING, f"trying to {what} (HTTP {resp.status_code})"
            )
        if code == "REFERENCE_NOT_FOUND":
            raise NotFound(f"Nessie: {msg}", hint="list branches with `wap branches`")
        if code == "CONTENT_NOT_FOUND":
            raise NotFound(f"Nessie: {msg}")
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

    def content(self, ref: str, key: Sequence[str]) -> dict[str, Any] | None:
        """The content (an Iceberg table: type ICEBERG_TABLE, metadataLocation) at `key` on `ref`; None if absent."""
        # API v2 path keys: elements joined by '.', a '.' inside an element written as U+001D.
        path_key = ".".join(e.replace(".", "\x1d") for e in key)
        try:
            d = self._call(
                "GET",
                f"/trees/{urlquote(ref, safe='')}/contents/{urlquote(path_key, safe='')}",
                what=f"read {'.'.join(key)} on {ref}",
            )
        except NotFound:
            return None
        content = d.get("content")
        return content if isinstance(content, dict) else None

    def table_keys(self, ref: str = "main") -> list[tuple[str, ...]]:
        """The keys of every Iceberg table on `ref`."""
        out: list[tuple[str, ...]] = []
        token: str | None = None
        while True:
            params: dict[str, Any] = {"max-records": 500}
            if token:
                params["page-token"] = token
            d = self._call(
                "GET", f"/trees/{urlquote(ref, safe='')}/entries", what=f"list the tables on {ref}", params=params
            )
            for e in d.get("entries", []):
                if e.get("type") == "ICEBERG_TABLE":
                    out.append(tuple(str(x) for x in (e.get("name") or {}).get("elements", [])))
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
    from wapflow.lakehouse.catalog_props import SPARK_CATALOG_CLASS
    from wapflow.lakehouse.catalog_props import catalog_properties as base_properties

    name = branch_catalog_name(cfg.lakehouse.catalog_name, branch)
    props = base_properties(cfg)
    props["ref"] = branch
    spark.conf.set(f"spark.sql.catalog.{name}", SPARK_CATALOG_CLASS)
    for k, v in props.items():
        spark.conf.set(f"spark.sql.catalog.{name}.{k}", v)
    return name


class NessieCatalog(CatalogReads):
    """The catalog of catalog = "nessie": one Nessie branch holds every table a run writes, schema changes
    included, and one merge publishes them all (or none); metadata read through Nessie's content API."""

    # Whether one branch holds every table of the catalog (a failed group write drops it only if it made it).
    spans_catalog = True

    def why_not_together(self) -> str | None:
        """A Nessie branch spans the catalog: one merge publishes every table of it."""
        return None

    def __init__(self, cfg: WapConfig, storage: Storage, tables: Callable[[], Tables], client: NessieClient) -> None:
        super().__init__(cfg, storage, tables)
        self.client = client
        self._bases: dict[str, str] = {}
        self._views: dict[str, Tables] = {}
        self._checked = False

    @property
    def spark(self) -> SparkSession:
        return self.tables.spark

    def check(self) -> None:
        """Nessie down, wrong URL or token: one clear error before Spark starts or anything is written."""
        if not self._checked:
            self.client.config()
            self._checked = True

    def _source(self, ref: str) -> MetadataSource:
        self.check()  # the same error as before Spark starts
        return NessieSource(self.client, ref, self.storage)

    def list_branches(self, table: TableName | None = None) -> builtins.list[BranchInfo]:
        view = self.direct()
        if view is None:
            return self.list(table) if table is not None else self.all_branches()
        if table is None:
            return catalog_branches(self.client)

        def at(ref: str) -> TableMetadata:
            found = self.direct(ref)
            assert found is not None
            return found

        return branches_changing(self.client, view, at, table)

    def sandbox_left(self, branch: str, tables: Sequence[TableName], staging: TableName | None) -> bool:
        """A catalog-level branch may hold anything: Spark looks."""
        return True

    def commit(
        self,
        branch: str,
        run_id: str,
        slices: Sequence[RunSlice],
        *,
        atomic: bool,
        after_each: Callable[[RunSlice], None] | None = None,
    ) -> PublishedRun:
        """One merge, atomic whatever is asked (a Nessie branch is one commit on main)."""
        return self._merge_published(branch, run_id, slices, after_each)

    def describe(self, branch: str) -> str:
        return f"Nessie branch {branch}"

    def tables_for(self, branch: str) -> Tables:
        """The catalog's tables as seen on a Nessie branch (a Spark catalog with ref=branch)."""
        if branch not in self._views:
            catalog = register_branch_catalog(self.spark, self.cfg, branch)
            self._views[branch] = Tables(
                self.spark, catalog, manifests=self.tables.manifests, format_version=self.tables.format_version
            )
        return self._views[branch]

    def iceberg_ref(self, branch: str) -> str:
        """On a Nessie branch every table is written on its own Iceberg main."""
        return "main"

    def open(self, branch: str) -> bool:
        """Create the Nessie branch from main's current hash unless it exists (True: created now)."""
        validate_branch(branch)
        existed = self.client.get_reference(branch) is not None
        self._fork_point(branch)
        return not existed

    def _fork_point(self, branch: str) -> str:
        """The branch's base on main, creating the branch from main's head when it does not exist."""
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

    def _branch_exists(self, branch: str) -> bool:
        ref = self.client.get_reference(branch)
        return ref is not None and ref.type == "BRANCH"

    def create(self, table: TableName, branch: str) -> int | None:
        """The Nessie branch already holds the table (opened before the write); its head is the base."""
        self._fork_point(branch)
        return self.tables_for(branch).head(table, "main")

    def exists(self, table: TableName, branch: str) -> bool:
        return self._branch_exists(branch) and self.tables_for(branch).exists(table)

    def write_target(self, table: TableName, branch: str) -> str:
        return self.tables_for(branch).ident(table)

    def add_columns(self, table: TableName, branch: str, columns: list[StructField]) -> bool:
        """A Nessie branch isolates schema changes too: main keeps its schema until the merge."""
        self.tables_for(branch).add_columns(table, columns)
        return True

    def reset(self, table: TableName, branch: str, mine: Sequence[Snapshot]) -> None:
        """Roll the table back, on the branch only, to where the run's first snapshot started."""
        if not mine:
            return
        view = self.tables_for(branch)
        if mine[0].parent_id is None:
            view.drop(table)
        else:
            view.roll_back(table, mine[0].parent_id)

    def discard(self, branch: str, tables: Sequence[TableName]) -> Discarded:
        """The branch is the run's whole sandbox: deleting it discards every table on it."""
        self._bases.pop(branch, None)
        return Discarded(found=self.client.delete_branch(branch), whole_branch=True)

    def _merge_published(
        self,
        branch: str,
        run_id: str,
        slices: Sequence[RunSlice],
        after_each: Callable[[RunSlice], None] | None,
    ) -> PublishedRun:
        """Merge the branch into main in one Nessie commit, then delete it. When main changed one of the same
        tables since the fork (Nessie refuses such a merge: both sides changed the table's metadata pointer),
        the audited rows (appends only) are appended again on a fresh branch of the new main, and that is
        merged: method "merge_reapplied"."""
        tables = _slice_tables(slices)
        method = "merge"
        try:
            self._merge(branch, run_id=run_id, tables=tables)
        except PublishConflict as conflict:
            self._reapply(branch, run_id, slices, conflict)
            method = "merge_reapplied"
        for sl in slices:
            if after_each is not None:
                after_each(sl)
        heads = {t.dotted: self.tables.head(t, "main") for t in tables}
        try:
            self.client.delete_branch(branch)
            self.client.delete_branch(_retry_branch(branch))
        except WapError as e:
            return PublishedRun(method, heads, f"Nessie branch {branch} could not be deleted ({e})")
        finally:
            self._bases.pop(branch, None)
        return PublishedRun(method, heads)

    def _merge(self, branch: str, *, run_id: str, tables: builtins.list[TableName]) -> str:
        """Publish every table of the branch in one Nessie commit on main; returns main's new hash."""
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
                return ref.hash
        try:
            return self.client.merge(
                branch,
                from_hash=ref.hash,
                expected_hash=base,
                message=f"wapflow: publish run {run_id} ({names})",
                properties=merge_properties(run_id, tables, branch),
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

    def _reapply(self, branch: str, run_id: str, slices: Sequence[RunSlice], conflict: PublishConflict) -> None:
        """Append each table's audited rows (the run's own snapshots, appends only) to a fresh branch of main."""
        retry = _retry_branch(branch)
        self.client.delete_branch(retry)
        self._bases.pop(retry, None)
        self._fork_point(retry)
        old, fresh = self.tables_for(branch), self.tables_for(retry)
        try:
            for sl in slices:
                if not sl.snapshots:
                    continue
                if any(s.operation != "append" for s in sl.snapshots):
                    raise conflict
                rows = old.read_increment(sl.table, sl.base, sl.snapshots[-1].snapshot_id)
                if not fresh.exists(sl.table):  # created by this run; main still lacks it
                    fresh.ensure_namespace(sl.table)
                    fresh.create_like(sl.table, rows)
                with_properties(rows.writeTo(fresh.ident(sl.table)), sl.properties).append()
            self._merge(retry, run_id=run_id, tables=_slice_tables(slices))
        except Exception:
            self.client.delete_branch(retry)
            self._bases.pop(retry, None)
            raise

    def audit_view(self, table: TableName, branch: str, base: int | None, group: Sequence[TableName] = ()) -> AuditView:
        """Reproduction SQL names the table at the branch (table@branch, readable from any session);
        uniqueness is checked against main as the branch forked from it, and other tables (foreign keys)
        are read on the branch, so tables written by the same run count. Nothing is pinned: a merge
        is conditional on main not having changed the same tables."""
        wt = self.tables_for(branch)
        at_branch = self.tables.ident(TableName(table.namespace, f"{table.name}@{branch}"))

        def main_table(t: TableName) -> DataFrame:
            if t == table:
                return wt.read_increment(t, None, base) if base is not None else wt.read(t).limit(0)
            return wt.read(t)

        return AuditView(at_branch, main_table)

    def list(self, table: TableName) -> builtins.list[BranchInfo]:
        """Nessie branches that change this table."""
        return branches_changing(self.client, self.tables, self.tables_for, table)

    def all_branches(self) -> builtins.list[BranchInfo]:
        return catalog_branches(self.client)


def _branch_refs(client: NessieClient) -> list[Reference]:
    """Nessie branches other than main whose names wapflow accepts."""
    out = []
    for ref in client.references():
        if ref.type != "BRANCH" or ref.name == "main":
            continue
        try:
            validate_branch(ref.name)
        except WapError:
            continue
        out.append(ref)
    return out


def catalog_branches(client: NessieClient) -> list[BranchInfo]:
    """Every Nessie branch but main, as catalog-level branches (they may hold any table)."""
    return [BranchInfo(None, r.name, None, r.hash) for r in _branch_refs(client)]


def branches_changing(
    client: NessieClient, main: TableMetadata, at: Callable[[str], TableMetadata], table: TableName
) -> list[BranchInfo]:
    """Nessie branches on which `table` differs from main: `main` reads main's metadata, `at(ref)` a branch's
    (Spark's catalogs per ref, or the catalog read directly: wapflow.lakehouse.metadata)."""
    out = []
    main_head = main.head(table, "main") if main.exists(table) else None
    for ref in _branch_refs(client):
        view = at(ref.name)
        if not view.exists(table):
            continue
        head = view.head(table, "main")
        if head is not None and head != main_head:  # branches that change this table
            out.append(BranchInfo(table, ref.name, head, ref.hash))
    return out


def _retry_branch(branch: str) -> str:
    return validate_branch(f"{branch[:120]}-reapply")


def _slice_tables(slices: Sequence[RunSlice]) -> list[TableName]:
    """The tables a publish changes (a table without rows of the run, e.g. an unused quarantine, is left out)."""
    return [sl.table for sl in slices if sl.snapshots] or [sl.table for sl in slices]


# --- Nessie -----------------------------------------------------------------------------------------------


class NessieSource:
    """Nessie's API v2: a table's metadataLocation at a ref (/trees/{ref}/contents/{key}), then the file."""

    def __init__(self, client: NessieClient, ref: str, storage: Storage) -> None:
        self.client = client
        self.ref = ref
        self.storage = storage

    def load(self, table: TableName) -> dict[str, Any] | None:
        content = self.client.content(self.ref, (*table.namespace, table.name))
        if content is None or content.get("type") != "ICEBERG_TABLE" or not content.get("metadataLocation"):
            return None
        return read_metadata_file(self.storage, str(content["metadataLocation"]), table)

    def list_tables(self) -> list[TableName]:
        return [TableName(tuple(k[:-1]), k[-1]) for k in self.client.table_keys(self.ref) if len(k) >= 2]
