"""Table metadata without Spark: a table's current Iceberg metadata read from the catalog itself.

`wap history`, `wap branches` and whatever else only reads snapshots, refs and schemas need no JVM: the
catalog says where a table's current metadata file is (or, for a REST catalog, hands the metadata over), and
that file is Iceberg's own JSON, parsed by the same functions Spark's view uses (model.snapshots_of,
model.refs_of). One seam, a MetadataSource per catalog kind:

- the embedded SQLite catalog and `catalog = "jdbc"` on PostgreSQL or SQLite: the `iceberg_tables` row of
  Iceberg's JDBC catalog (SQLAlchemy), then the metadata file (local, or s3:// through wapflow.storage; gzip'd
  too);
- `catalog = "rest"` (or a custom catalog whose type is rest): the REST catalog's loadTable (httpx), with the
  token, client credential and `header.*` properties Iceberg's own client would send;
- `catalog = "nessie"`: Nessie's v2 content API (the table's metadataLocation at a ref), then the file
  (wapflow.lakehouse.nessie.NessieSource).

Hive, Glue, Hadoop, other JDBC databases and custom catalogs have no source here: they are read through
Spark as before (`source_for` returns None). `WAP_METADATA=spark` forces that path for every catalog (to
compare the two, as benchmarks/bench_metadata.py does).

Errors are wapflow's: an unreachable catalog is Unreachable (transient, exit 5), refused credentials an
EnvironmentProblem (exit 3), as `wap run` says them; a table the catalog does not have is None.
"""

from __future__ import annotations

import gzip
import json
import os
import ssl
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote as urlquote

from wapflow.audit.metrics import FileMetrics
from wapflow.errors import ConfigError, EnvironmentProblem, ServiceError, Unreachable, WapError
from wapflow.lakehouse.catalog_props import REST_TOKEN_SETTING
from wapflow.lakehouse.model import Ref, Snapshot, refs_of, snapshots_of
from wapflow.lakehouse.reads import SnapshotReads
from wapflow.spark import errors as spark_errors
from wapflow.sql.identifiers import TableName

if TYPE_CHECKING:
    import httpx
    import sqlalchemy as sa

    from wapflow.config import WapConfig
    from wapflow.lakehouse.manifests import ManifestMetrics
    from wapflow.storage import Storage

# "spark": read table metadata through Spark even where the catalog can be read directly.
FORCE_ENV = "WAP_METADATA"
_REST_IMPL = "org.apache.iceberg.rest.RESTCatalog"
_TIMEOUT = 30.0


class MetadataSource(Protocol):
    """Where one catalog keeps its tables' metadata, read without Spark."""

    def load(self, table: TableName) -> dict[str, Any] | None:
        """The table's current metadata (Iceberg's JSON), None when the catalog has no such table."""
        ...

    def list_tables(self) -> list[TableName]: ...


class CatalogTables(SnapshotReads):
    """Table metadata straight from the catalog (no JVM). Each table is loaded once per instance: an instance is
    one command's consistent view, so make a new one to see later commits. `manifests`: the reader of data
    files' column metrics (wapflow.lakehouse.manifests), for added_file_metrics."""

    def __init__(self, source: MetadataSource, catalog: str, manifests: ManifestMetrics | None = None) -> None:
        self.source = source
        self.catalog = catalog
        self.manifests = manifests
        self._loaded: dict[str, dict[str, Any] | None] = {}

    def metadata(self, table: TableName) -> dict[str, Any] | None:
        if table.dotted not in self._loaded:
            self._loaded[table.dotted] = self.source.load(table)
        return self._loaded[table.dotted]

    def exists(self, table: TableName) -> bool:
        return self.metadata(table) is not None

    def snapshots(self, table: TableName) -> dict[int, Snapshot]:
        meta = self.metadata(table)
        return snapshots_of(meta) if meta is not None else {}

    def refs(self, table: TableName) -> dict[str, Ref]:
        meta = self.metadata(table)
        return refs_of(meta) if meta is not None else {}

    def list_tables(self) -> list[TableName]:
        return sorted(set(self.source.list_tables()), key=lambda t: t.dotted)

    def added_file_metrics(self, table: TableName, branch: str, snapshot_ids: list[int]) -> FileMetrics:
        """Column metrics summed over the data files the given snapshots added, from the manifests with no JVM
        (as Tables.added_file_metrics; Lakehouse.iceberg.file_metrics offers this view only where PyIceberg is
        installed). `branch` is the one the snapshots are on: a snapshot's own manifests say what it added."""
        meta = self.metadata(table)
        if meta is None:
            return FileMetrics(rows=0)
        if self.manifests is None or not self.manifests.available(meta):
            raise EnvironmentProblem(
                f"the column metrics of {table}'s data files cannot be read here without Spark "
                f"(its files are at {meta.get('location')}; PyIceberg reads them, from a local or s3:// warehouse)",
                hint="pip install 'wapflow[readers]', or set WAP_METADATA=spark to read them through Spark",
            )
        return self.manifests.added(meta, [int(i) for i in snapshot_ids])


def direct_reads() -> bool:
    """False when $WAP_METADATA=spark asks for Spark's view of table metadata."""
    return os.environ.get(FORCE_ENV, "").strip().lower() != "spark"


def source_for(cfg: WapConfig, storage: Storage) -> MetadataSource | None:
    """A table-branch catalog's metadata without Spark, or None for a catalog only Spark reads here (or
    WAP_METADATA=spark). Nessie's is read by its catalog (wapflow.lakehouse.nessie.NessieSource)."""
    if not direct_reads():
        return None
    lh = cfg.lakehouse
    if lh.catalog in ("sqlite", "jdbc"):
        from wapflow.runs.databases import jdbc_catalog_url

        url = jdbc_catalog_url(cfg)
        return JdbcSource(url, lh.catalog_name, storage) if url is not None else None
    from wapflow.lakehouse.catalog_props import catalog_properties

    if lh.catalog in ("rest", "custom"):
        props = catalog_properties(cfg)
        if props.get("type") == "rest" or props.get("catalog-impl") == _REST_IMPL:
            from wapflow.lakehouse.tls import ssl_context

            return RestSource(props, verify=ssl_context(cfg))
    return None


def read_metadata_file(storage: Storage, location: str, table: TableName) -> dict[str, Any]:
    """A metadata.json the catalog points at (local or s3://; gzip'd ones too, by their magic bytes)."""
    try:
        data = storage.read_bytes(location)
    except OSError as e:
        raise EnvironmentProblem(
            f"the catalog names {location} as the current metadata of {table}, but it cannot be read: "
            f"{e.strerror or type(e).__name__}",
            hint="the warehouse's files must be readable from this machine (a moved or deleted warehouse?)",
        ) from None
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    meta: dict[str, Any] = json.loads(data)
    return meta


# --- Iceberg's JDBC catalog (the embedded SQLite one, PostgreSQL) ----------------------------------------


class JdbcSource:
    """Iceberg's JdbcCatalog tables: `iceberg_tables` (catalog_name, table_namespace, table_name,
    metadata_location, previous_metadata_location[, iceberg_type in schema V1]); namespaces joined by dots."""

    def __init__(self, url: str, catalog_name: str, storage: Storage) -> None:
        self.url = url
        self.catalog_name = catalog_name
        self.storage = storage
        self.what = "the catalog's " + ("PostgreSQL" if url.startswith("postgresql") else "SQLite") + " database"
        self._engine: sa.Engine | None = None
        self._columns: set[str] | None = None

    def _missing_sqlite(self) -> bool:
        """The embedded catalog's file is made by the first write: until then there are no tables (and reading
        must not create it)."""
        return self.url.startswith("sqlite:///") and not os.path.exists(self.url[len("sqlite:///") :])

    def _query(self, sql: str, **params: Any) -> list[Any]:
        import sqlalchemy as sa

        from wapflow.runs.databases import connection_error, create_engine

        if self._engine is None:
            self._engine = create_engine(self.url, what="[lakehouse] catalog_properties.uri", reached_as=self.what)
        try:
            with self._engine.connect() as conn:
                if self._columns is None:
                    inspector = sa.inspect(conn)
                    found = inspector.has_table("iceberg_tables")
                    self._columns = {c["name"] for c in inspector.get_columns("iceberg_tables")} if found else set()
                if not self._columns:  # the catalog has never been written to
                    return []
                if "iceberg_type" in self._columns:  # schema V1 keeps views in the same table
                    sql += " AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)"
                return list(conn.execute(sa.text(sql), params).all())
        except WapError:
            raise
        except sa.exc.DBAPIError as e:
            raise connection_error(e, self.url, what=self.what) from None

    def load(self, table: TableName) -> dict[str, Any] | None:
        if self._missing_sqlite():
            return None
        rows = self._query(
            "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = :c AND table_namespace = :ns "
            "AND table_name = :t",
            c=self.catalog_name,
            ns=".".join(table.namespace),
            t=table.name,
        )
        if not rows or not rows[0][0]:
            return None
        return read_metadata_file(self.storage, str(rows[0][0]), table)

    def list_tables(self) -> list[TableName]:
        if self._missing_sqlite():
            return []
        rows = self._query(
            "SELECT table_namespace, table_name FROM iceberg_tables WHERE catalog_name = :c", c=self.catalog_name
        )
        return [TableName(tuple(str(ns).split(".")), str(name)) for ns, name in rows]


# --- the Iceberg REST catalog -----------------------------------------------------------------------------


class RestSource:
    """The Iceberg REST catalog API (GET /v1/config, then /v1/{prefix}/namespaces/.../tables/...): loadTable
    answers with the metadata itself. Auth as Iceberg's client: `token` (bearer), or `credential`
    (client_id:secret) exchanged at `oauth2-server-uri` (default {uri}/v1/oauth/tokens); `header.NAME` sent as is."""

    def __init__(self, props: dict[str, str], *, verify: ssl.SSLContext | bool = True) -> None:
        uri = props.get("uri", "").rstrip("/")
        if not uri:
            raise ConfigError('catalog = "rest" needs catalog_properties.uri', hint="e.g. uri = http://host:8181")
        self.uri = uri
        self.props = props
        self.verify = verify  # [lakehouse] ca_bundle's CAs besides the public ones (wapflow.lakehouse.tls)
        self._http: httpx.Client | None = None
        self._prefix: str | None = None

    def _client(self) -> httpx.Client:
        import httpx

        if self._http is None:
            headers = {k[len("header.") :]: v for k, v in self.props.items() if k.startswith("header.")}
            self._http = httpx.Client(base_url=self.uri, headers=headers, timeout=_TIMEOUT, verify=self.verify)
            token = self.props.get("token") or self._exchange_credential()
            if token:
                self._http.headers["Authorization"] = f"Bearer {token}"
        return self._http

    def _exchange_credential(self) -> str | None:
        credential = self.props.get("credential")
        if not credential:
            return None
        client_id, _, secret = credential.rpartition(":")
        form = {
            "grant_type": "client_credentials",
            "client_secret": secret,
            "scope": self.props.get("scope", "catalog"),
        }
        if client_id:
            form["client_id"] = client_id
        url = self.props.get("oauth2-server-uri") or f"{self.uri}/v1/oauth/tokens"
        doc = self._call("POST", url, what="exchange its credential for a token", data=form)
        return str(doc.get("access_token") or "") or None

    def _call(self, method: str, path: str, *, what: str, missing_ok: bool = False, **kw: Any) -> dict[str, Any]:
        import httpx

        try:
            resp = self._client().request(method, path, **kw)
        except httpx.UnsupportedProtocol:
            raise ConfigError(
                f"{self.uri} is not an http(s) URL", hint="catalog_properties.uri is the REST catalog's base URL"
            ) from None
        except httpx.TransportError as e:
            untrusted = spark_errors.tls_untrusted(e)
            if untrusted is not None:
                raise spark_errors.untrusted_tls_error(f"the Iceberg catalog at {self.uri}", untrusted) from None
            raise Unreachable(
                f"could not reach the Iceberg catalog at {self.uri} while trying to {what}: {type(e).__name__}",
                hint="check that the server is running and reachable, then retry",
            ) from None
        if resp.status_code == 404 and missing_ok:
            return {}
        if resp.status_code < 300:
            doc: dict[str, Any] = resp.json() if resp.content else {}
            return doc
        if resp.status_code in (401, 419):
            raise spark_errors.unauthorised_error(
                f"the Iceberg catalog at {self.uri}", REST_TOKEN_SETTING, f"trying to {what}"
            )
        if resp.status_code == 403:
            raise EnvironmentProblem(
                f"the Iceberg catalog at {self.uri} refused the request to {what} (forbidden, HTTP 403)",
                hint=f"the token is valid but may not do this: check its grants ({REST_TOKEN_SETTING})",
            )
        if resp.status_code >= 500 or resp.status_code == 429:
            raise ServiceError(
                f"the Iceberg catalog at {self.uri} failed to {what}: HTTP {resp.status_code}",
                hint="a server error; retry",
            )
        raise ConfigError(
            f"the Iceberg catalog at {self.uri} refused to {what}: HTTP {resp.status_code}",
            hint="check catalog_properties.uri (the REST catalog's base URL)",
        )

    def _base(self) -> str:
        """/v1/{prefix} as the server's /v1/config says (the warehouse property sent as Iceberg's client does)."""
        if self._prefix is None:
            params = {"warehouse": self.props["warehouse"]} if self.props.get("warehouse") else {}
            self._client()
            cfg = self._call("GET", "/v1/config", what="read its configuration", params=params)
            prefix = {**(cfg.get("defaults") or {}), **(cfg.get("overrides") or {})}.get("prefix") or ""
            self._prefix = f"/v1/{urlquote(prefix, safe='')}" if prefix else "/v1"
        return self._prefix

    @staticmethod
    def _ns(namespace: tuple[str, ...]) -> str:
        return urlquote("\x1f".join(namespace), safe="")

    def load(self, table: TableName) -> dict[str, Any] | None:
        path = f"{self._base()}/namespaces/{self._ns(table.namespace)}/tables/{urlquote(table.name, safe='')}"
        doc = self._call("GET", path, what=f"load {table}", missing_ok=True)
        meta = doc.get("metadata")
        return meta if isinstance(meta, dict) else None

    def _pages(self, path: str, key: str, what: str, **params: str) -> list[Any]:
        out: list[Any] = []
        token: str | None = None
        while True:
            query = {**params, **({"pageToken": token} if token else {})}
            doc = self._call("GET", path, what=what, params=query, missing_ok=True)
            out += doc.get(key) or []
            token = doc.get("next-page-token")
            if not token:
                return out

    def list_tables(self) -> list[TableName]:
        base = self._base()
        found: list[TableName] = []
        todo: list[tuple[str, ...]] = [()]
        while todo:
            parent = todo.pop()
            params = {"parent": "\x1f".join(parent)} if parent else {}
            for ns in self._pages(f"{base}/namespaces", "namespaces", "list namespaces", **params):
                child = tuple(str(p) for p in ns)
                todo.append(child)
                path = f"{base}/namespaces/{self._ns(child)}/tables"
                for ident in self._pages(path, "identifiers", f"list the tables of {'.'.join(child)}"):
                    found.append(TableName(tuple(ident["namespace"]), str(ident["name"])))
        return found
