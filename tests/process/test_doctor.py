"""`wap doctor` as a person runs it (a real process, no JVM): every configured part, what to fix, no secret.

The parts are real: a local S3 server with users whose rights differ, ports where nothing listens, a
webhook URL with a token in it. PostgreSQL is the test session's real server (tests/support/pg_server.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.cli_harness import wap
from support.pg_server import PASSWORD
from support.s3_server import REGION, S3Env, start_s3_env
from wapflow._dev.pg_server import LocalPostgres, Urls
from wapflow.lakehouse.processes import free_port

# A fresh machine has no jars: the fixture fetches what these configs need, as `wap setup` does, so "jars: ok"
# never depends on another test (or `make test`'s setup) having filled the cache first.
pytestmark = pytest.mark.usefixtures("setup_jars")


@pytest.fixture(scope="module")
def s3env() -> Iterator[S3Env]:
    env = start_s3_env()
    yield env
    env.server.stop()


def _doctor(cfg: Path, **env: str) -> tuple[int, dict[str, dict[str, str]], str]:
    """Exit code, findings by part (a part's failure wins over its warnings), and the whole text of a --json
    run."""
    p = wap("doctor", "--config", str(cfg), "--json", **env)
    doc = json.loads(p.stdout)
    assert "Traceback" not in p.stderr, p.stderr
    assert doc["ok"] == (p.code == 0)
    by_part: dict[str, dict[str, str]] = {}
    for f in doc["findings"]:
        if f["part"] not in by_part or f["status"] == "fail":
            by_part[f["part"]] = f
    by_part |= {f"{f['part']} ({f['status']})": f for f in doc["findings"]}
    return p.code, by_part, p.stdout + p.stderr


def test_embedded_default_is_healthy_and_the_table_reads_like_the_json(tmp_path: Path) -> None:
    cfg = tmp_path / "wap.toml"
    cfg.write_text(f'[lakehouse]\nwarehouse = "{tmp_path / "lake"}"\nmaster = "local[2]"\n')
    code, parts, _ = _doctor(cfg)
    assert code == 0
    assert {p: f["status"] for p, f in parts.items() if "(" not in p} == {
        "java": "ok",
        "jars": "ok",  # the setup_jars fixture fetched them, as `wap setup` does
        "class archive": "ok",  # `make test` runs `wap setup`, which makes it
        "spark": "ok",
        "catalog": "ok",
        "run store": "ok",
        "dbos": "skip",
        "warehouse": "ok",
    }
    assert "created by the first run" in parts["run store"]["detail"]
    assert not (tmp_path / "lake" / "wapflow_runs.db").exists()  # looking does not create the run store
    p = wap("doctor", "--config", str(cfg))
    assert p.code == 0 and "every configured part answered" in p.stdout
    for part in ("java", "jars", "spark", "catalog", "run store", "dbos", "warehouse"):
        assert part in p.stdout


def test_each_broken_part_is_named_with_a_fix_and_exit_3(tmp_path: Path) -> None:
    master_port, nessie_port = free_port(), free_port()
    (tmp_path / "file-not-folder").write_text("x")
    cfg = tmp_path / "wap.toml"
    cfg.write_text(
        f"""
[lakehouse]
warehouse = "{tmp_path / "file-not-folder" / "lake"}"
master = "spark://127.0.0.1:{master_port}"
catalog = "nessie"
nessie_uri = "http://127.0.0.1:{nessie_port}/api/v2"
nessie_token = "nessie-token-do-not-print"
jars_dir = "{tmp_path / "no-jars"}"

[sources.trips]
table = "nyc.trips"
location = "{tmp_path / "landing"}"

[alerts.sinks.team]
type = "slack"
url_env = "WAP_TEST_UNSET_SLACK_URL"
"""
    )
    code, parts, text = _doctor(cfg)
    assert code == 3
    assert parts["spark"]["status"] == "fail" and f"127.0.0.1:{master_port}" in parts["spark"]["detail"]
    assert "[lakehouse].master" in parts["spark"]["fix"]
    assert parts["jars"]["status"] == "fail" and parts["jars"]["fix"] == "run `wap setup`"
    assert parts["class archive"]["status"] == "warn" and parts["class archive"]["fix"] == "run `wap setup`"
    assert parts["catalog"]["status"] == "fail" and str(nessie_port) in parts["catalog"]["detail"]
    assert "wap nessie up" in parts["catalog"]["fix"]
    assert parts["warehouse"]["status"] == "fail" and "is a file" in parts["warehouse"]["detail"]
    assert parts["source trips"]["status"] == "warn" and "does not exist" in parts["source trips"]["detail"]
    assert parts["alert sink team"]["status"] == "fail"
    assert parts["alert sink team"]["fix"].startswith("export WAP_TEST_UNSET_SLACK_URL=")
    assert "nessie-token-do-not-print" not in text
    # For people: the same parts in a table, on stdout, and no stack trace.
    p = wap("doctor", "--config", str(cfg))
    assert p.code == 3 and "part(s) need fixing" in p.stdout and "Traceback" not in p.text


def test_a_cluster_elsewhere_with_the_embedded_catalog_is_warned_about(tmp_path: Path) -> None:
    cfg = tmp_path / "wap.toml"
    cfg.write_text(
        f'[lakehouse]\nwarehouse = "{tmp_path / "lake"}"\nmaster = "spark://spark-master.invalid:7077"\n'
        f'[sources.trips]\ntable = "nyc.trips"\nlocation = "{tmp_path}"\n'
    )
    code, parts, _ = _doctor(cfg)
    assert code == 3 and parts["spark"]["status"] == "fail"  # the master's host does not resolve
    assert "PostgreSQL" in parts["catalog (warn)"]["fix"] and "machines" in parts["catalog (warn)"]["detail"]
    assert "PostgreSQL" in parts["run store (warn)"]["fix"]
    assert "executors" in parts["warehouse (warn)"]["detail"] and "S3" in parts["warehouse (warn)"]["fix"]


def test_s3_warehouse_access_checked_with_a_write_probe_and_no_key_printed(tmp_path: Path, s3env: S3Env) -> None:
    landing, lake = s3env.buckets()

    def config(keys_toml: str, name: str) -> Path:
        cfg = tmp_path / name
        cfg.write_text(
            f'[lakehouse]\nwarehouse = "s3://{lake}/warehouse"\nmaster = "local[2]"\n'
            f'[s3]\nendpoint = "{s3env.endpoint}"\nregion = "{REGION}"\nlanding = "s3://{landing}/in/"\n{keys_toml}\n'
        )
        return cfg

    code, parts, text = _doctor(config(s3env.admin.toml(), "admin.toml"))
    assert code == 0, text
    assert parts["warehouse"]["detail"].endswith("write, read, delete: ok")
    assert parts["landing"]["status"] == "ok"
    assert s3env.keys_in(lake) == set()  # the probe object was deleted
    for secret in s3env.admin.secrets():
        assert secret not in text
    # A user who may only read: the warehouse fails, naming the permission; the landing bucket is fine.
    code, parts, text = _doctor(config(s3env.reader.toml(), "reader.toml"))
    assert code == 3
    assert parts["warehouse"]["status"] == "fail" and "may not write" in parts["warehouse"]["detail"]
    assert "s3:PutObject" in parts["warehouse"]["fix"]
    assert parts["landing"]["status"] == "ok"
    for secret in s3env.reader.secrets():
        assert secret not in text


def test_webhook_url_is_checked_but_never_shown(tmp_path: Path) -> None:
    cfg = tmp_path / "wap.toml"
    cfg.write_text(
        f'[lakehouse]\nwarehouse = "{tmp_path / "lake"}"\nmaster = "local[2]"\n'
        '[alerts.sinks.ops]\ntype = "webhook"\nurl_env = "WAP_TEST_HOOK"\n'
        '[alerts.sinks.slack]\ntype = "slack"\nurl_env = "WAP_TEST_SLACK"\n'
    )
    secret_url = "https://hooks.example.invalid/services/T000/B000/s3cr3t-path-token"
    code, parts, text = _doctor(cfg, WAP_TEST_HOOK=secret_url, WAP_TEST_SLACK="not a url")
    assert code == 3
    assert parts["alert sink ops"]["status"] == "ok" and "$WAP_TEST_HOOK" in parts["alert sink ops"]["detail"]
    assert parts["alert sink slack"]["status"] == "fail" and "not an http(s) URL" in parts["alert sink slack"]["detail"]
    assert "s3cr3t" not in text and "hooks.example" not in text and "not a url" not in text


def _pg_config(tmp_path: Path, jdbc: str, sqlalchemy: str, password: str) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg = tmp_path / "wap.toml"
    cfg.write_text(
        f'[lakehouse]\nwarehouse = "{tmp_path / "lake"}"\nmaster = "local[2]"\ncatalog = "jdbc"\n'
        f'catalog_properties = {{ uri = "{jdbc}", "jdbc.user" = "wap", "jdbc.password" = "{password}" }}\n'
        f'run_store = "{sqlalchemy}"\n'
        f'[sources.trips]\ntable = "nyc.trips"\nlocation = "{tmp_path}"\n'
    )
    return cfg


def test_postgresql_profile_catalog_run_store_and_dbos(
    tmp_path: Path,
    pg: LocalPostgres,
    pg_db: Urls,
) -> None:
    cfg = _pg_config(tmp_path, pg_db.jdbc, pg_db.sqlalchemy, PASSWORD)
    code, parts, text = _doctor(cfg)
    assert code == 0, text
    assert parts["catalog"]["status"] == "ok" and "(postgresql)" in parts["catalog"]["detail"]
    assert "no tables yet" in parts["catalog"]["detail"]
    assert parts["run store"]["status"] == "ok" and "postgresql" in parts["run store"]["detail"]
    assert parts["dbos"]["status"] == "ok" and "first `wap watch`" in parts["dbos"]["detail"]
    assert f"127.0.0.1:{pg.port}" in parts["run store"]["detail"]
    assert PASSWORD not in text
    # The same parts, one wrong password: both databases refuse, each says what to check, the password stays out.
    wrong = "Wrong-pw-7d1c"
    bad = _pg_config(tmp_path / "bad", pg_db.jdbc, pg_db.sqlalchemy.replace(PASSWORD, wrong), wrong)
    code, parts, text = _doctor(bad)
    assert code == 3
    for part in ("catalog", "run store", "dbos"):
        assert parts[part]["status"] == "fail" and "refused" in parts[part]["detail"], parts[part]
        assert "password" in parts[part]["fix"]
    assert wrong not in text and PASSWORD not in text
    # The server gone (a port where nothing listens): unreachable, not a wrong password.
    port = free_port()
    gone = _pg_config(
        tmp_path / "gone",
        pg_db.jdbc.replace(str(pg.port), str(port)),
        pg_db.sqlalchemy.replace(str(pg.port), str(port)),
        PASSWORD,
    )
    code, parts, text = _doctor(gone)
    assert code == 3 and "cannot reach" in parts["run store"]["detail"] and PASSWORD not in text
