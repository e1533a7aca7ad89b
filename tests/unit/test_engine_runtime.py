"""Which engine a `wap` command may use, found without a JVM: the config it reads, its `engine` setting, the key,
the runtime folder, and the socket's frames (tests/process/test_engine.py drives the real engine)."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from wapflow.config import load_config
from wapflow.engine import protocol as P
from wapflow.engine.client import strip_flag
from wapflow.engine.runtime import (
    EngineUnavailable,
    config_path,
    engine_key,
    engine_limits,
    engine_setting,
    ensure_runtime_dir,
    metadata_needs_spark,
)
from wapflow.errors import ConfigError


def toml(folder: Path, text: str, name: str = "wap.toml") -> Path:
    p = folder / name
    p.write_text(text)
    return p


def test_the_config_is_found_as_the_cli_finds_it(tmp_path: Path) -> None:
    here = toml(tmp_path, "")
    other = toml(tmp_path, "", "other.toml")
    cwd = str(tmp_path)
    assert config_path(["run", "t", "f"], {}, cwd) == here.resolve()
    for argv in (["run", "-c", "other.toml"], ["run", "--config", str(other)], ["run", "--config=other.toml"]):
        assert config_path(argv, {}, cwd) == other.resolve(), argv
    assert config_path(["run"], {"WAP_CONFIG": str(other)}, cwd) == other.resolve()
    assert config_path(["run", "--", "-c", "nope.toml"], {}, cwd) == here.resolve()  # after `--`: an argument
    (tmp_path / "empty").mkdir()
    assert config_path(["run"], {}, str(tmp_path / "empty")) is None  # no wap.toml there: the defaults
    with pytest.raises(EngineUnavailable, match="does not exist"):
        config_path(["run", "-c", "missing.toml"], {}, cwd)


def test_engine_setting_is_auto_unless_wap_toml_says_otherwise(tmp_path: Path) -> None:
    assert engine_setting(None)[0] == "auto"
    assert engine_setting(toml(tmp_path, '[lakehouse]\nmaster = "local[2]"\n'))[0] == "auto"
    assert engine_setting(toml(tmp_path, '[lakehouse]\nengine = "off"\n'))[0] == "off"
    # A Spark Connect master, or a file the command itself must report, is not handed to an engine.
    assert engine_setting(toml(tmp_path, '[lakehouse]\nengine = "auto"\nmaster = "sc://h:1"\n'))[0] == "off"
    assert engine_setting(toml(tmp_path, "[lakehouse\nengine = "))[0] == "off"


def test_the_key_follows_the_config_and_the_start_environment_not_per_command_variables(tmp_path: Path) -> None:
    cfg = toml(tmp_path, '[lakehouse]\nengine = "auto"\n')
    cwd = str(tmp_path)
    base = {"PATH": os.environ.get("PATH", "")}
    key = engine_key(cfg, cfg.read_bytes(), cwd, base)
    assert key == engine_key(cfg, cfg.read_bytes(), cwd, base | {"WAP_CRASH_AT": "prepare", "WAP_ENGINE": "auto"})
    assert key == engine_key(cfg, cfg.read_bytes(), cwd, base | {"HOME": "/elsewhere"})
    # Only wap.toml's Spark settings are the engine's: other edits keep it (each command reads them itself).
    for kept in (b"# changed\n", b'engine_idle = "4s"\n', b'[tables."a.b"]\nreview = "always"\n'):
        assert key == engine_key(cfg, cfg.read_bytes() + kept, cwd, base), kept
    for changed in (b'master = "local[1]"\n', b'[lakehouse.spark_conf]\n"spark.x" = "1"\n', b'[s3]\nregion = "x"\n'):
        assert key != engine_key(cfg, cfg.read_bytes() + changed, cwd, base), changed
    assert key == engine_key(cfg, cfg.read_bytes(), cwd, base | {"WAP_ENGINE_MAX": "1", "WAP_ENGINE_MIN_FREE": "1t"})
    assert key != engine_key(cfg, cfg.read_bytes(), cwd, base | {"JAVA_TOOL_OPTIONS": "-Xmx2g"})
    assert key != engine_key(cfg, cfg.read_bytes(), cwd, base | {"AWS_PROFILE": "prod"})
    assert key != engine_key(cfg, cfg.read_bytes(), cwd, base | {"WAP_JARS_DIR": "/jars"})
    # Without a wap.toml the defaults resolve against the folder: another folder, another engine.
    assert engine_key(None, b"", cwd, base) != engine_key(None, b"", str(tmp_path / "x"), base)


def test_runtime_folder_is_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    folder = ensure_runtime_dir()
    assert folder == tmp_path / "wapflow" and stat.S_IMODE(folder.stat().st_mode) == 0o700
    folder.chmod(0o755)  # opened by someone: closed again
    assert stat.S_IMODE(ensure_runtime_dir().stat().st_mode) == 0o700
    folder.rmdir()
    (tmp_path / "wapflow").write_text("not a folder")
    with pytest.raises(EngineUnavailable):
        ensure_runtime_dir()


def test_no_engine_flag_is_taken_off_the_line_before_double_dash() -> None:
    argv = ["run", "t", "f", "--no-engine", "--json"]
    assert strip_flag(argv) and argv == ["run", "t", "f", "--json"]
    argv = ["query", "--", "--no-engine"]
    assert not strip_flag(argv) and argv == ["query", "--", "--no-engine"]


def test_frames_round_trip_and_a_closed_end_is_closed() -> None:
    a, b = socket.socketpair()
    left, right = P.Channel(a), P.Channel(b)
    left.send(P.STDOUT, b"x" * 200_000)
    left.send(P.EXIT, b"0")
    assert right.recv() == (P.STDOUT, b"x" * 200_000)
    assert right.recv() == (P.EXIT, b"0")
    left.close()
    with pytest.raises(P.Closed):
        right.recv()
    right.close()


@pytest.mark.parametrize(("value", "ok"), [("auto", True), ("off", True), ("sc://h:15002", True), ("on", False)])
def test_engine_key_in_wap_toml_is_validated(tmp_path: Path, value: str, ok: bool) -> None:
    cfg = toml(tmp_path, f'[lakehouse]\nengine = "{value}"\nengine_idle = "90s"\n')
    if ok:
        assert load_config(cfg).lakehouse.engine == value
    else:
        with pytest.raises(ConfigError, match="engine"):
            load_config(cfg)
    with pytest.raises(ConfigError, match="engine_idle"):
        load_config(toml(tmp_path, '[lakehouse]\nengine_idle = "soon"\n'))


def test_metadata_commands_go_to_the_engine_only_where_spark_reads_the_catalog() -> None:
    sqlite, hive = b'[lakehouse]\ncatalog = "sqlite"\n', b'[lakehouse]\ncatalog = "hive"\n'
    for command in ("history", "branches", "diff"):
        assert not metadata_needs_spark(command, sqlite, {})
        assert not metadata_needs_spark(command, b"", {})  # the defaults: the embedded catalog
        assert metadata_needs_spark(command, hive, {})
        assert metadata_needs_spark(command, sqlite, {"WAP_METADATA": "spark"})
    rest = b'[lakehouse]\ncatalog = "custom"\ncatalog_properties = { type = "rest", uri = "http://x" }\n'
    assert not metadata_needs_spark("history", rest, {})
    assert metadata_needs_spark(
        "history", b'[lakehouse]\ncatalog = "jdbc"\ncatalog_properties = { uri = "jdbc:mysql://h/d" }\n', {}
    )
    assert not metadata_needs_spark("run", hive, {})  # not a metadata command: COMMANDS decide


def test_engine_limits_are_read_from_the_environment() -> None:
    assert engine_limits({}) == (3, 2**30)
    assert engine_limits({"WAP_ENGINE_MAX": "1", "WAP_ENGINE_MIN_FREE": "800m"}) == (1, 800 * 2**20)
    for bad in ({"WAP_ENGINE_MAX": "0"}, {"WAP_ENGINE_MAX": "many"}, {"WAP_ENGINE_MIN_FREE": "lots"}):
        with pytest.raises(EngineUnavailable, match="WAP_ENGINE_M"):
            engine_limits(bad)


def test_a_run_of_a_misspelt_table_section_is_not_handed_to_an_engine(tmp_path: Path, monkeypatch) -> None:
    """The typo is said from wap.toml alone, in this process, at once: no engine (12.7 s) is started for it."""
    from wapflow.engine import client

    cfg = toml(tmp_path, '[lakehouse]\nengine = "auto"\n\n[tables."shop.ordrs"]\nchecks = []\n')
    assert client._misspelt_table(["run", "--branch", "b", "shop.orders", "f.parquet"], cfg)
    assert not client._misspelt_table(["run", "shop.ordrs", "f.parquet"], cfg)
    assert not client._misspelt_table(["run", "other.table", "f.parquet"], cfg)  # not close: its own question

    def no_engine(*_a: object, **_k: object) -> None:
        raise AssertionError("an engine was asked for")

    monkeypatch.setattr(client, "Client", no_engine)
    monkeypatch.delenv("WAP_ENGINE", raising=False)
    assert client.handoff(["run", "shop.orders", "f.parquet", "--config", str(cfg)], "wap") is None
