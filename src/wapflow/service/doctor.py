"""`wap doctor`: every part wap.toml configures, checked from this machine, each with what to fix.

Each check is cheap and reads only (the one write is the S3 warehouse probe `wap storage init` makes too,
deleted at once). Nothing starts Spark: the master is checked by connecting to its port. Secrets (S3 keys,
tokens, database and webhook passwords) never reach a finding: every text is scrubbed of them at the end.
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import httpx

from wapflow.config import WapConfig
from wapflow.errors import ConfigError, WapError
from wapflow.spark.kind import CONNECT_SCHEME, is_connect_url

Status = Literal["ok", "warn", "fail", "skip"]
_TIMEOUT = 3.0
_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
_SECRET_PROPS = ("password", "secret", "token", "credential")
# Below this much free space under a local warehouse, doctor warns: a run writes its batch's data files and the
# table's metadata there, and a full disk fails the run (exit 3) until someone frees space.
LOW_SPACE = 2**30


@dataclass(frozen=True)
class Finding:
    """One part: what was found, and if it is not fine, what to do."""

    part: str
    status: Status
    detail: str
    fix: str = ""

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def diagnose(cfg: WapConfig) -> list[Finding]:
    """All checks that apply to this config, in the order a run needs the parts."""
    checks: list[tuple[str, Callable[[WapConfig], list[Finding]]]] = [
        ("java", _java),
        ("jars", _jars),
        ("class archive", _class_archive),
        ("spark", _master),
        ("catalog", _catalog),
        ("run store", _run_store),
        ("dbos", _dbos),
        ("storage", _storage),
        ("alerts", _alerts),
    ]
    found: list[Finding] = []
    for part, check in checks:
        try:
            found += check(cfg)
        except WapError as e:  # what a command would have said, as this part's finding
            found.append(Finding(part, "fail", e.message, e.hint or ""))
    secrets = _secrets(cfg)
    return [_scrub(f, secrets) for f in found]


def failed(findings: list[Finding]) -> bool:
    return any(f.status == "fail" for f in findings)


# --- the JVM side ---------------------------------------------------------------------------------------


def _connect_client(cfg: WapConfig) -> bool:
    return is_connect_url(cfg.lakehouse.master)


def _java(cfg: WapConfig) -> list[Finding]:
    from wapflow.lakehouse import jvm

    if _connect_client(cfg):
        return [Finding("java", "skip", "not needed here: Spark Connect runs Java on the server")]
    java = jvm.find_java()
    if java is None:
        return [Finding("java", "fail", "Java was not found", "install a JDK 17+ or set JAVA_HOME")]
    major = jvm.java_major_version(java)
    if major is None:
        return [Finding("java", "fail", f"could not read the version of {java}", "check that `java -version` works")]
    if major < jvm.MIN_JAVA:
        return [Finding("java", "fail", f"{java} is Java {major}", f"install a JDK {jvm.MIN_JAVA}+ and set JAVA_HOME")]
    return [Finding("java", "ok", f"Java {major} ({java})")]


def _jars(cfg: WapConfig) -> list[Finding]:
    from wapflow.lakehouse import jvm

    lh = cfg.lakehouse
    if _connect_client(cfg):
        return [Finding("jars", "skip", "not needed here: the Spark Connect server holds them (`wap serve` adds them)")]
    if lh.jars:
        missing = [j for j in lh.jars if "://" not in j and not Path(j).expanduser().is_file()]
        if missing:
            return [Finding("jars", "fail", f"lakehouse.jars: missing {', '.join(missing)}", "fix the paths")]
        return [Finding("jars", "ok", f"{len(lh.jars)} jar(s) listed in lakehouse.jars")]
    if lh.jar_resolution == "ivy":
        return [Finding("jars", "ok", "resolved by Spark (Ivy) when it starts")]
    folder = Path(lh.jars_dir).expanduser() if lh.jars_dir else jvm.default_jars_dir()
    needed = jvm.artifacts_for(cfg)
    missing = [a.coordinate for a in needed if not (folder / a.filename).is_file()]
    if missing:
        return [Finding("jars", "fail", f"not downloaded yet: {', '.join(missing)}", "run `wap setup`")]
    return [Finding("jars", "ok", f"{len(needed)} jar(s) in {folder}")]


def _class_archive(cfg: WapConfig) -> list[Finding]:
    from wapflow.lakehouse import class_archive, jvm

    part = "class archive"
    java = jvm.find_java()
    if _connect_client(cfg) or java is None:
        return [Finding(part, "skip", "no local driver JVM here" if java else "no Java")]
    if not class_archive.enabled():
        return [Finding(part, "skip", f"off ({class_archive.SWITCH}=off)")]
    if (why := class_archive.not_for(cfg)) is not None:
        return [Finding(part, "skip", f"none for this config: {why}; Spark starts slower")]
    path = class_archive.path_for(cfg, java)
    if not path.is_file():
        return [Finding(part, "warn", "none for this Java and PySpark: Spark starts slower", "run `wap setup`")]
    return [Finding(part, "ok", f"{path} ({path.stat().st_size // 1_000_000} MB)")]


def _endpoints(master: str) -> list[tuple[str, int]]:
    """host:port pairs of a spark:// (possibly several masters) or sc:// master."""
    if is_connect_url(master):
        rest = master[len(CONNECT_SCHEME) :].split("/")[0].split(";")[0]
        host, _, port = rest.rpartition(":") if ":" in rest else (rest, "", "15002")
        return [(host or rest, int(port or 15002))]
    out = []
    for part in master[len("spark://") :].split(","):
        host, _, port = part.rpartition(":")
        out.append((host, int(port or 7077)))
    return out


def _reachable(host: str, port: int) -> str | None:
    """None if something accepts a TCP connection at host:port, else why not."""
    try:
        with socket.create_connection((host.strip("[]"), port), timeout=_TIMEOUT):
            return None
    except OSError as e:
        return e.strerror or type(e).__name__


def _master(cfg: WapConfig) -> list[Finding]:
    master = cfg.lakehouse.master
    if master.startswith("local"):
        from wapflow.lakehouse.connect import running

        served = running(cfg)
        if served is not None:
            return [Finding("spark", "ok", f"`wap serve` at {served.endpoint} (pid {served.pid}): commands use it")]
        return [Finding("spark", "ok", f"{master}: Spark runs inside each wap process (`wap serve` keeps one warm)")]
    if not master.startswith(("spark://", CONNECT_SCHEME)):
        return [Finding("spark", "skip", f"{master}: not checked (only spark:// and sc:// masters are)")]
    try:
        endpoints = _endpoints(master)
    except ValueError:
        return [Finding("spark", "fail", f"{master} is not host:port", "e.g. spark://10.0.0.5:7077 or sc://host:15002")]
    found = []
    for host, port in endpoints:
        why = _reachable(host, port)
        kind = "Spark Connect server" if is_connect_url(master) else "Spark master"
        if why is None:
            found.append(Finding("spark", "ok", f"{kind} at {host}:{port} accepts connections"))
        else:
            hint = "start it with `wap serve`" if is_connect_url(master) else "start the master"
            found.append(
                Finding("spark", "fail", f"no {kind} at {host}:{port} ({why})", f"{hint}, or fix [lakehouse].master")
            )
    return found


def _remote_cluster(cfg: WapConfig) -> bool:
    """Spark's executors (or its Connect server) may be on other machines than this one."""
    master = cfg.lakehouse.master
    if not master.startswith(("spark://", CONNECT_SCHEME)):
        return False
    try:
        return any(h not in _LOOPBACK for h, _ in _endpoints(master))
    except ValueError:
        return False


# --- catalog -------------------------------------------------------------------------------------------


def _catalog(cfg: WapConfig) -> list[Finding]:
    from wapflow.runs.databases import check_jdbc_catalog, jdbc_catalog_url

    lh = cfg.lakehouse
    kind = lh.catalog
    props = lh.catalog_properties
    uri = props.get("uri", "")
    found: list[Finding] = []
    if kind == "nessie":
        from wapflow.lakehouse.nessie_config import TOKEN_SETTING, nessie_token, nessie_uri

        found.append(
            _http_get(
                cfg, nessie_uri(cfg) + "/config", nessie_token(cfg), TOKEN_SETTING, "start Nessie (`wap nessie up`)"
            )[0]
        )
    elif kind == "rest":
        from wapflow.lakehouse.catalog_props import REST_TOKEN_ENV, REST_TOKEN_SETTING

        if not uri:
            return [Finding("catalog", "fail", 'catalog = "rest" without catalog_properties.uri', "set the uri")]
        token = props.get("token") or os.environ.get(REST_TOKEN_ENV)
        config_url = uri.rstrip("/") + "/v1/config"
        reached, answer = _http_get(cfg, config_url, token, REST_TOKEN_SETTING, "start the REST catalog")
        found.append(reached)
        if reached.status == "ok" and answer is not None:
            found.append(_rest_group_commit(cfg, answer))
    elif kind == "hive" and uri.startswith("thrift://"):
        u = urlsplit(uri)
        why = _reachable(u.hostname or "", u.port or 9083)
        where = f"Hive metastore at {u.hostname}:{u.port or 9083}"
        found.append(
            Finding("catalog", "ok", f"{where} accepts connections")
            if why is None
            else Finding("catalog", "fail", f"no {where} ({why})", "check catalog_properties.uri")
        )
    elif kind == "hadoop":
        found.append(Finding("catalog", "warn", "Hadoop catalog: no atomic commits for concurrent writers", "use jdbc"))
    elif (url := jdbc_catalog_url(cfg)) is not None:
        if url.startswith("sqlite:///") and not Path(url[len("sqlite:///") :]).exists():
            found.append(
                Finding("catalog", "ok", f"SQLite catalog {url[len('sqlite:///') :]}: created by the first run")
            )
        else:
            info = check_jdbc_catalog(cfg)
            tables = (
                f"{info['tables']} table(s) in catalog {lh.catalog_name}" if info["initialized"] else "no tables yet"
            )
            found.append(Finding("catalog", "ok", f"JDBC catalog at {info['url']} ({info['dialect']}): {tables}"))
    else:
        found.append(Finding("catalog", "skip", f'catalog = "{kind}": not checked here (Spark reaches it at run time)'))
    if kind == "sqlite" and _remote_cluster(cfg):
        found.append(
            Finding(
                "catalog",
                "warn",
                "the embedded SQLite catalog is a file on this machine: every wap process that writes must run "
                "here (SQLite's locks do not work across machines)",
                'for workers on several machines: catalog = "jdbc" on PostgreSQL, Nessie or REST '
                "(docs/guides/deploying.md#what-holds-state-and-who-must-share-it)",
            )
        )
    return found


def _http_get(
    cfg: WapConfig, url: str, token: str | None, token_setting: str, start: str
) -> tuple[Finding, httpx.Response | None]:
    """The catalog server's finding from one GET of `url`, and its answer when it gave one (None otherwise)."""
    from wapflow.lakehouse.tls import ca_bundle, ssl_context
    from wapflow.spark import errors as spark_errors

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        r = httpx.get(url, headers=headers, timeout=_TIMEOUT, verify=ssl_context(cfg))
    except httpx.HTTPError as e:
        untrusted = spark_errors.tls_untrusted(e)
        if untrusted is not None:
            err = spark_errors.untrusted_tls_error(url, untrusted)
            return Finding("catalog", "fail", err.message, err.hint or ""), None
        return Finding(
            "catalog", "fail", f"{url}: {_first_line(e) or type(e).__name__}", f"{start}, or fix the uri"
        ), None
    if r.status_code in (401, 403):
        err = spark_errors.unauthorised_error(url, token_setting, f"reading its configuration (HTTP {r.status_code})")
        return Finding("catalog", "fail", err.message, err.hint or ""), r
    bundle = ca_bundle(cfg)
    if url.startswith("https://") and bundle is not None:
        return Finding("catalog", "ok", f"{url} answers {r.status_code} (TLS verified, CA bundle {bundle})"), r
    if r.status_code >= 400:
        return Finding("catalog", "fail", f"{url} answers {r.status_code}", "check the uri"), r
    return Finding("catalog", "ok", f"{url} answers {r.status_code}"), r


def _rest_group_commit(cfg: WapConfig, answer: httpx.Response) -> Finding:
    """How the REST server applies a multi-table commit (`wap run-tables`), from its answer to GET /v1/config
    and [lakehouse] rest_group_commit."""
    from wapflow.lakehouse.group_commit import TRANSACTIONS_ENDPOINT, rest_atomicity

    part = "group commit"
    try:
        doc = answer.json()
    except ValueError as e:
        return Finding(part, "skip", f"{answer.url}: its configuration is not JSON ({type(e).__name__})")
    properties = {**(doc.get("defaults") or {}), **(doc.get("overrides") or {})} if isinstance(doc, dict) else {}
    endpoints = doc.get("endpoints") if isinstance(doc, dict) else None
    uri = cfg.lakehouse.catalog_properties.get("uri", "")
    if isinstance(endpoints, list) and TRANSACTIONS_ENDPOINT not in {str(e) for e in endpoints}:
        return Finding(
            part, "warn", f"the REST server at {uri} lists no multi-table commit: `wap run-tables` is refused",
            "run tables one at a time, or use a server with multi-table commits, a JDBC catalog or Nessie",
        )  # fmt: skip
    atomic, caveat = rest_atomicity(properties, cfg.lakehouse.rest_group_commit, uri)
    if atomic:
        how = "as wap.toml says (rest_group_commit)" if cfg.lakehouse.rest_group_commit else "Nessie's: one commit"
        return Finding(part, "ok", f"the REST server at {uri} commits a group atomically ({how})")
    fix = (
        "use a server that commits groups atomically (Nessie, Polaris, Lakekeeper) if a partly published group matters"
        if atomic is False
        else 'once you know your server: [lakehouse] rest_group_commit = "atomic" or "table_by_table"'
    )
    return Finding(part, "warn", caveat or "", fix)


# --- wapflow's own state ---------------------------------------------------------------------------------


def _run_store(cfg: WapConfig) -> list[Finding]:
    from wapflow.config.urls import redact_url
    from wapflow.runs.databases import check_database

    url = cfg.run_store_url()
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///") :]).exists():
        found = [Finding("run store", "ok", f"{url}: created by the first run")]
    else:
        info = check_database(url, what="the run store")
        found = [Finding("run store", "ok", f"{info['url']} ({info['dialect']} {info['server_version']})")]
        found.append(_schema(url))
    if url.startswith("sqlite") and _remote_cluster(cfg) and cfg.sources:
        found.append(
            Finding(
                "run store",
                "warn",
                f"{redact_url(url)} is a file on this machine: `wap watch` workers elsewhere would keep ledgers "
                "of their own and publish a file once per machine",
                "set run_store to a PostgreSQL URL every worker shares "
                "(docs/guides/deploying.md#what-holds-state-and-who-must-share-it)",
            )
        )
    return found


def _schema(url: str) -> Finding:
    """The run store's schema revision against this wapflow's (a doctor only looks: the next command upgrades)."""
    from wapflow.runs import schema
    from wapflow.runs.databases import create_engine

    engine = create_engine(url, what="[lakehouse] run_store", reached_as="the run store")
    try:
        v = schema.version(engine)
    finally:
        engine.dispose()
    if v.up_to_date:
        return Finding("store schema", "ok", f"revision {v.current} (this wapflow's)")
    if v.current is None:
        return Finding("store schema", "ok", f"not versioned yet: the next command upgrades it to {v.head}")
    try:
        schema.check_known(v.current, "the run store")
    except ConfigError as e:
        return Finding("store schema", "fail", e.message, e.hint or "")
    return Finding("store schema", "ok", f"revision {v.current}: the next command upgrades it to {v.head}")


def _dbos(cfg: WapConfig) -> list[Finding]:
    from wapflow.runs.databases import check_dbos_database, dbos_database_url

    if not cfg.sources:
        return [Finding("dbos", "skip", "no [sources]: `wap watch` (DBOS) is not used")]
    url = dbos_database_url(cfg)
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///") :]).exists():
        return [Finding("dbos", "ok", f"{url}: created by the first `wap watch`")]
    info = check_dbos_database(cfg)
    state = "DBOS tables present" if info["initialized"] else "DBOS creates its tables at the first `wap watch`"
    return [Finding("dbos", "ok", f"{info['url']} ({info['dialect']}): {state}")]


# --- files -----------------------------------------------------------------------------------------------


def _storage(cfg: WapConfig) -> list[Finding]:
    from wapflow.lakehouse.spark_s3 import s3_settings
    from wapflow.storage.settings import is_s3_uri

    found = []
    wh = cfg.warehouse_location()
    if is_s3_uri(wh):
        found.append(_s3("warehouse", wh, cfg, write=True))
    else:
        found.append(_local("warehouse", cfg.local_warehouse_path() or Path(wh), write=True))
        if _remote_cluster(cfg):
            found.append(
                Finding(
                    "warehouse",
                    "warn",
                    "a local folder, while Spark's executors may run on other machines: they write the data "
                    "files, so they need the same folder at the same path",
                    "put the warehouse on S3 (or a filesystem every node mounts at one path)",
                )
            )
    for name, src in cfg.sources.items():
        loc = src.location
        if is_s3_uri(loc):
            found.append(_s3(f"source {name}", loc, cfg, write=False))
        else:
            folder = Path(loc)
            while any(ch in folder.name for ch in "*?[") and folder != folder.parent:
                folder = folder.parent
            found.append(_local(f"source {name}", folder if folder.is_absolute() else cfg.base_dir / folder))
    s = s3_settings(cfg)
    if s.landing and not any(src.location.startswith(s.landing) for src in cfg.sources.values()):
        found.append(_s3("landing", s.landing, cfg, write=False))
    return found


def _local(part: str, folder: Path, *, write: bool = False) -> Finding:
    if folder.is_dir():
        if write and not os.access(folder, os.W_OK | os.X_OK):
            return Finding(part, "fail", f"{folder}: not writable by this user", "fix its permissions")
        if not write:
            return Finding(part, "ok", f"{folder}: a folder")
        return _room(part, folder, f"{folder}: a folder, writable")
    blocker = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        return Finding(part, "fail", f"{folder} cannot be a folder: {blocker} is a file", "point wap.toml at a folder")
    if write and blocker is not None and os.access(blocker, os.W_OK):
        return _room(part, blocker, f"{folder}: created by the first run")
    return Finding(part, "fail" if write else "warn", f"{folder} does not exist", "create it, or fix wap.toml")


def _room(part: str, folder: Path, found: str) -> Finding:
    """A folder runs write to, with the free space of its disk: a warning below LOW_SPACE."""
    free = shutil.disk_usage(folder).free
    words = f"{free / 2**30:.1f} GB free" if free >= 2**30 else f"{free / 2**20:.0f} MB free"
    if free < LOW_SPACE:
        return Finding(
            part,
            "warn",
            f"{found}; only {words} on its disk",
            "free space there or move it to a larger disk: a full disk fails runs (exit 3) until space is freed",
        )
    return Finding(part, "ok", f"{found}, {words}")


def _s3(part: str, location: str, cfg: WapConfig, *, write: bool) -> Finding:
    from wapflow.lakehouse.spark_s3 import s3_settings
    from wapflow.storage.s3 import S3Store

    s = s3_settings(cfg)
    store = S3Store(s)
    try:
        if write:
            store.check_write(location)
        else:
            store.check_read(location)
    except WapError as e:
        return Finding(part, "fail", f"{location} at {s.describe_endpoint()}: {e.message}", e.hint or "")
    what = "write, read, delete: ok" if write else "list, read: ok"
    return Finding(part, "ok", f"{location} at {s.describe_endpoint()}: {what}")


# --- alerts ----------------------------------------------------------------------------------------------


def _alerts(cfg: WapConfig) -> list[Finding]:
    found = []
    for name, sink in cfg.alerts.sinks.items():
        part = f"alert sink {name}"
        url = os.environ.get(sink.url_env, "")
        if not url:
            found.append(Finding(part, "fail", f"${sink.url_env} is not set", f"export {sink.url_env}=<the URL>"))
            continue
        u = urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            found.append(Finding(part, "fail", f"${sink.url_env} is not an http(s) URL", "set it to the webhook URL"))
            continue
        found.append(
            Finding(part, "ok", f"{sink.type} URL in ${sink.url_env} (not shown); `wap alerts test` sends a test alert")
        )
    return found


# --- secrets ---------------------------------------------------------------------------------------------


def _secrets(cfg: WapConfig) -> list[str]:
    """Every configured secret value, so that no finding can carry one (an error text quoting a URL, say)."""
    from wapflow.lakehouse.nessie_config import nessie_token
    from wapflow.lakehouse.spark_s3 import s3_settings

    values = list(s3_settings(cfg).secret_values())
    from wapflow.lakehouse.catalog_props import REST_TOKEN_ENV

    values += [t for t in (nessie_token(cfg), os.environ.get(REST_TOKEN_ENV)) if t]
    for key, value in cfg.lakehouse.catalog_properties.items():
        if any(word in key.lower() for word in _SECRET_PROPS):
            values.append(value)
    from wapflow.config.urls import password_of

    for url in (cfg.lakehouse.run_store, cfg.watch.database):
        password = password_of(url) if url else None
        if password:
            values.append(password)
    for sink in cfg.alerts.sinks.values():
        url = os.environ.get(sink.url_env)
        if url:
            values += [url, urlsplit(url).path]
    return [v for v in values if v and len(v) >= 4]


def _scrub(f: Finding, secrets: list[str]) -> Finding:
    """Configured secrets, and any password inside a URL, out of a finding's text."""
    from wapflow.redact import redact

    return Finding(f.part, f.status, redact(f.detail, *secrets), redact(f.fix, *secrets))


def _first_line(e: object) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__
