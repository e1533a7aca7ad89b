"""The JVM class archive's safety rules (wapflow.lakehouse.class_archive), without a JVM: an archive is put in
place only after the process that wrote it exited 0, a JVM is pointed only at an archive in place, and the
switch turns both off. The real training run is `wap setup`'s (`make test` runs it first); the shared test
session's JVM mapping that archive is asserted in tests/spark/test_session_archive.py."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from wapflow.config import WapConfig, parse_config
from wapflow.lakehouse import class_archive, jvm


@pytest.fixture
def cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> WapConfig:
    monkeypatch.setenv("WAP_JARS_DIR", str(tmp_path / "jars"))
    monkeypatch.delenv(class_archive.SWITCH, raising=False)
    monkeypatch.delenv(class_archive.TRAINING, raising=False)
    return WapConfig()


def trainer(script: str) -> list[str]:
    """A stand-in training process: writes (or not) the file named by the training variable, then exits."""
    return [sys.executable, "-c", f"import os, sys\npart = os.environ[{class_archive.TRAINING!r}]\n{script}"]


def test_an_archive_is_put_in_place_only_after_its_writer_exited_0(cfg: WapConfig) -> None:
    path, state = class_archive.ensure(cfg, trainer("open(part, 'wb').write(b'x' * 64)"))
    assert state == "made" and path is not None and path.read_bytes() == b"x" * 64
    assert list(path.parent.glob("*.part")) == []
    opts = class_archive.java_options(cfg)
    assert f"-XX:SharedArchiveFile={path}" in opts and "-Xshare:auto" in opts and "-Xlog:cds*=off" in opts
    # Present: no second training run (this one would fail).
    assert class_archive.ensure(cfg, trainer("sys.exit(1)")) == (path, "present")


@pytest.mark.parametrize(
    "script",
    [
        "open(part, 'wb').write(b'half'); sys.exit(1)",  # the JVM failed after writing part of it
        "open(part, 'wb').write(b'half'); os.kill(os.getpid(), 9)",  # killed while writing
        "pass",  # this Java wrote nothing (no base archive, dumping unsupported)
    ],
)
def test_a_failed_or_killed_training_leaves_no_archive_and_spark_starts_without_one(
    cfg: WapConfig, script: str
) -> None:
    path, why = class_archive.ensure(cfg, trainer(script))
    assert path is None and "did not write" in why
    folder = class_archive.folder(cfg)
    assert list(folder.glob("*.jsa*")) == []  # no truncated archive a JVM could map (it would crash with SIGBUS)
    assert class_archive.java_options(cfg) == []


def test_the_switch_turns_making_and_using_off(cfg: WapConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    path, _ = class_archive.ensure(cfg, trainer("open(part, 'wb').write(b'x')"))
    assert path is not None
    monkeypatch.setenv(class_archive.SWITCH, "off")
    assert class_archive.java_options(cfg) == []
    assert class_archive.ensure(cfg, trainer("sys.exit(1)")) == (None, f"off ({class_archive.SWITCH}=off)")


def test_the_training_process_writes_where_it_is_told(cfg: WapConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(class_archive.TRAINING, "/tmp/x.part")
    assert class_archive.java_options(cfg)[0] == "-XX:ArchiveClassesAtExit=/tmp/x.part"


def test_stale_parts_of_killed_trainings_are_removed(cfg: WapConfig) -> None:
    folder = class_archive.folder(cfg)
    folder.mkdir(parents=True)
    old, fresh = folder / "spark-a.jsa.1.part", folder / "spark-a.jsa.2.part"
    old.write_bytes(b"old")
    fresh.write_bytes(b"fresh")  # maybe another `wap setup` writing right now: kept
    past = time.time() - 2 * 3600
    os.utime(old, (past, past))
    class_archive.ensure(cfg, trainer("pass"))
    assert not old.exists() and fresh.exists()


def test_the_key_follows_the_java_runtime(tmp_path: Path) -> None:
    def fake_java(root: Path, modules: bytes) -> str:
        (root / "bin").mkdir(parents=True)
        (root / "lib" / "server").mkdir(parents=True)
        (root / "lib" / "modules").write_bytes(modules)
        (root / "lib" / "server" / "libjvm.so").write_bytes(b"vm")
        java = root / "bin" / "java"
        java.write_text("")
        return str(java)

    a = fake_java(tmp_path / "a", b"17.0.15")
    assert class_archive.key(a, ()) == class_archive.key(a, ())
    assert class_archive.key(a, ()) != class_archive.key(fake_java(tmp_path / "b", b"17.0.16+1"), ())


def test_the_key_follows_the_jars_first_on_the_class_path(tmp_path: Path) -> None:
    java = tmp_path / "bin" / "java"
    runtime = tmp_path / jvm.ICEBERG_RUNTIME.filename
    runtime.write_bytes(b"1.11.0")
    before = class_archive.key(str(java), (str(runtime),))
    assert before != class_archive.key(str(java), ())
    runtime.write_bytes(b"1.11.0 rebuilt")  # another jar at the same path: its classes differ
    assert class_archive.key(str(java), (str(runtime),)) != before


def test_every_config_with_the_core_jars_shares_one_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """S3 or PostgreSQL jars come after Spark's own on the class path, so they do not change the archive; a
    config listing its own jars gets none made (its class path is not the training run's)."""
    monkeypatch.setenv("WAP_JARS_DIR", str(tmp_path / "jars"))
    java = str(tmp_path / "bin" / "java")
    plain = parse_config({})
    with_s3_and_pg = parse_config({"lakehouse": {"catalog_properties": {"uri": "jdbc:postgresql://h/db"}}, "s3": {}})
    assert class_archive.path_for(plain, java) == class_archive.path_for(with_s3_and_pg, java)
    own = parse_config({"lakehouse": {"jars": [str(tmp_path / "x.jar")]}})
    assert class_archive.path_for(own, java) != class_archive.path_for(plain, java)
    path, why = class_archive.ensure(own, trainer("sys.exit(3)"))
    assert path is None and why.startswith("not made: lakehouse.jars")
    ivy = parse_config({"lakehouse": {"jar_resolution": "ivy"}})
    assert class_archive.not_for(plain) is None and "ivy" in str(class_archive.not_for(ivy))
    # `wap doctor` says why rather than sending the user to a `wap setup` that would not make one.
    from wapflow.service.doctor import diagnose

    found = {f.part: f for f in diagnose(own)}["class archive"]
    assert (found.status, found.fix) == ("skip", "") and "lakehouse.jars" in found.detail


def test_the_driver_class_path_puts_the_core_jars_first_and_ships_only_to_a_cluster() -> None:
    core = [f"/j/{a.filename}" for a in jvm.CORE_ARTIFACTS]
    plan = jvm.JarPlan((core[0], "/j/hadoop-aws.jar", core[1], "https://h/x.jar"), ())
    local = jvm.driver_class_path(plan, local=True)
    assert local.first == tuple(core)
    assert local.last == ("/j/hadoop-aws.jar",)
    assert local.shipped == ("https://h/x.jar",)  # a jar by URL: Spark fetches it
    assert local.dist_classpath(None) == "/j/hadoop-aws.jar"
    assert local.dist_classpath("/opt/hadoop/*") == os.pathsep.join(["/opt/hadoop/*", "/j/hadoop-aws.jar"])
    cluster = jvm.driver_class_path(plan, local=False)
    assert (cluster.first, cluster.last) == (local.first, local.last)  # the driver's class path is the same
    assert cluster.shipped == plan.jars  # and the executors get every jar
    nothing_last = jvm.driver_class_path(jvm.JarPlan(tuple(core), ()), local=True)
    assert nothing_last.dist_classpath("/kept") == "/kept" and nothing_last.dist_classpath(None) is None


def test_a_class_path_set_in_spark_conf_is_kept_after_the_core_jars(tmp_path: Path) -> None:
    """spark_conf's own spark.driver.extraClassPath still reaches the driver, after the core jars (a Connect
    server's settings here: the same merge as a command's session)."""
    from wapflow.lakehouse.connect import server_confs

    core = tuple(f"/j/{a.filename}" for a in jvm.CORE_ARTIFACTS)
    plan = jvm.JarPlan((*core, "/j/postgresql.jar"), ())
    mine = parse_config({"lakehouse": {"spark_conf": {jvm.EXTRA_CLASS_PATH: "/opt/udfs/*"}}})
    confs = server_confs(mine, 15002, plan, tmp_path / "log")
    assert confs[jvm.EXTRA_CLASS_PATH] == os.pathsep.join([*core, "/opt/udfs/*"])
    plain = server_confs(parse_config({}), 15002, plan, tmp_path / "log")
    assert plain[jvm.EXTRA_CLASS_PATH] == os.pathsep.join(core)
    assert "postgresql" not in plain["spark.jars"]  # a local server: on the class path, after Spark's jars
    no_core = jvm.driver_class_path(jvm.JarPlan((), ()), local=True)
    assert no_core.extra_class_path(None) is None and no_core.extra_class_path("/x") == "/x"


def test_the_archive_key_names_the_jars_the_driver_really_has_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key is computed from the config alone (first_on_class_path: nothing fetched), the driver's class path from
    the resolved jars (driver_class_path): the two must name the same jars, or no driver would find its archive."""
    jars = tmp_path / "jars"
    jars.mkdir()
    for art in (*jvm.CORE_ARTIFACTS, jvm.POSTGRESQL_JDBC):
        (jars / art.filename).write_bytes(b"jar")  # in the cache: nothing is downloaded
    monkeypatch.setenv("WAP_JARS_DIR", str(jars))
    for cfg in (
        parse_config({}),
        parse_config({"lakehouse": {"catalog_properties": {"uri": "jdbc:postgresql://h/d"}}}),
    ):
        plan = jvm.plan_for(cfg)
        assert jvm.driver_class_path(plan, local=True).first == jvm.first_on_class_path(cfg) != ()


def test_an_archive_no_driver_used_for_30_days_goes_when_another_is_made(cfg: WapConfig) -> None:
    """An upgrade makes a new archive (another key); the old one, unused since, is removed with the next
    training after 30 days. One a driver maps is marked used (its mtime, once a day) and kept."""
    path, state = class_archive.ensure(cfg, trainer("open(part, 'wb').write(b'x')"))
    assert state == "made" and path is not None
    folder = path.parent
    old, recent = folder / "spark-0000000000000000.jsa", folder / "spark-1111111111111111.jsa"
    old.write_bytes(b"old")
    recent.write_bytes(b"recent")
    long_ago, weeks_ago = time.time() - 31 * 86400, time.time() - 20 * 86400
    os.utime(old, (long_ago, long_ago))
    os.utime(recent, (weeks_ago, weeks_ago))
    os.utime(path, (long_ago, long_ago))
    assert f"-XX:SharedArchiveFile={path}" in class_archive.java_options(cfg)  # mapped now: marked used
    assert time.time() - path.stat().st_mtime < 60
    path.unlink()  # as if this Java were upgraded: the next ensure trains a new one
    lines: list[str] = []
    made, state = class_archive.ensure(cfg, trainer("open(part, 'wb').write(b'y')"), progress=lines.append)
    assert state == "made" and made == path
    assert not old.exists() and recent.exists()
    assert "removed 1 JVM class archive(s) no driver used for 30 days" in lines
