"""The `wap` command as users call it, without a JVM: exit codes, --json documents and messages of config
errors, `wap init`, `wap demo generate`, a missing or too old Java. With Spark: tests/spark/test_cli.py."""

from __future__ import annotations

import stat
import subprocess

from support.cli_harness import WAP
from support.data import trips_file
from support.typer_cli import as_json, clean_env, runner, wap, write_config
from wapflow.cli import app
from wapflow.errors import EXIT_CONFLICT, EXIT_REVIEW, EXIT_STOPPED, EXIT_TRANSIENT, exit_code_table


def test_help_lists_every_exit_code_of_the_one_table() -> None:
    """`wap --help` prints the exit codes from errors.exit_code_table, so it cannot omit one (it once left out 5)."""
    table = exit_code_table()
    assert [code for code, _, _ in table] == [*range(7), 130]
    assert (EXIT_CONFLICT, "conflict") in [(c, n) for c, n, _ in table] and table[5][0] == EXIT_TRANSIENT
    assert table[-1][:2] == (EXIT_STOPPED, "stopped") and table[6][:2] == (EXIT_REVIEW, "review")
    out = " ".join(runner.invoke(app, ["--help"], terminal_width=300).output.split())
    for code, name, meaning in table:
        assert f"{code} {name}" in out and meaning


def test_config_error_exit_code_and_message(tmp_path):
    (tmp_path / "wap.toml").write_text('[lakehouse]\nwarehous = "x"\n')
    r = wap("run", "nyc.trips", "x.parquet", "--config", str(tmp_path / "wap.toml"))
    assert r.exit_code == 2
    assert "unknown key 'warehous'" in r.stderr and "did you mean 'warehouse'" in r.stderr
    r = wap("run", "nyc.trips", "x.parquet", "--config", str(tmp_path / "wap.toml"), "--json")
    assert r.exit_code == 2 and as_json(r)["error"]["kind"] == "config"


def test_init_writes_a_starter_once(tmp_path):
    target = tmp_path / "wap.toml"
    r = wap("init", "--path", str(target))
    assert r.exit_code == 0 and target.exists()
    r = wap("init", "--path", str(target))
    assert r.exit_code == 2 and "already exists" in r.stderr
    assert wap("init", "--path", str(target), "--force").exit_code == 0


def test_demo_generate(tmp_path):
    import pyarrow.parquet as pq

    r = wap("demo", "generate", "-n", "500", "--no-null", "--out", str(tmp_path), "--name", "c.parquet")
    assert r.exit_code == 0, r.output
    assert pq.read_table(tmp_path / "c.parquet").column("passenger_count").null_count == 0
    r = wap("demo", "generate", "-n", "500", "--null-rate", "0.1", "--out", str(tmp_path), "--name", "d.parquet")
    assert pq.read_table(tmp_path / "d.parquet").column("passenger_count").null_count == 50
    r = wap("demo", "generate", "--no-null", "--null-rate", "0.2", "--out", str(tmp_path))
    assert r.exit_code == 2


def test_missing_java_is_a_clear_message(tmp_path):
    env = clean_env(PATH=str(tmp_path), JAVA_HOME=str(tmp_path / "nojava"))
    p = subprocess.run([WAP, "setup"], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 3
    assert "Java was not found" in p.stderr and "JAVA_HOME" in p.stderr
    assert "Traceback" not in p.stderr and "Py4J" not in p.stderr


def test_too_old_java_is_a_clear_message(tmp_path):
    home = tmp_path / "jdk11"
    (home / "bin").mkdir(parents=True)
    fake = home / "bin" / "java"
    fake.write_text("#!/bin/sh\necho 'openjdk version \"11.0.21\" 2023-10-17' >&2\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    p = subprocess.run([WAP, "setup"], capture_output=True, text=True, timeout=120, env=clean_env(JAVA_HOME=str(home)))
    assert p.returncode == 3
    assert "Java 11" in p.stderr and "17" in p.stderr


def test_unknown_check_type_exit_code(tmp_path, landing):
    f = trips_file(landing, "f.parquet", 5)
    cfg = write_config(tmp_path, "cli_badcheck", checks=[{"check": "no_nulls", "column": "passenger_count"}])
    r = wap("run", "nyc.trips", str(f), "--config", str(cfg))
    assert r.exit_code == 2
    assert "unknown check type 'no_nulls'" in r.stderr and "not_null" in r.stderr
    assert f.exists()


def test_the_cli_bar_renders_tasks_and_rows_on_a_terminal() -> None:
    import io
    import time

    from rich.console import Console

    from wapflow.cli.output import BarMeter
    from wapflow.lakehouse.progress import Tick

    buf = io.StringIO()
    bar = BarMeter(Console(file=buf, force_terminal=True, width=120))
    bar.update(Tick("writing nyc.trips", 3, 8, 120_000, None))
    time.sleep(0.1)
    bar.update(Tick("writing nyc.trips", 8, 8, 160_000, None))
    bar.close()
    text = buf.getvalue()
    assert "writing nyc.trips" in text and "8/8" in text and "160,000 rows read" in text


def test_the_demos_next_commands_work_where_wap_is_not_on_the_path() -> None:
    """`make demo` runs .venv/bin/wap without activating the venv: the commands the demo suggests next first put
    that `wap` on the PATH (a bare `wap` there was "command not found"); nothing is added where PATH finds it."""
    import os
    import sys
    from pathlib import Path

    from wapflow.cli.demo import on_path

    here = Path(sys.executable).parent
    assert on_path(f"{here}{os.pathsep}/usr/bin") == ""
    hint = on_path("/usr/bin:/bin")
    assert hint in (f"source {Path(sys.prefix) / 'bin' / 'activate'} && ", f"PATH={here}:$PATH && ")
    done = subprocess.run(["bash", "-c", f"{hint}command -v wap"], capture_output=True, text=True, check=False,
                          env={"PATH": "/usr/bin:/bin"})  # fmt: skip
    assert Path(done.stdout.strip()).resolve() == (here / "wap").resolve(), done


def test_help_lists_commands_in_panels_in_the_order_a_new_user_meets_them() -> None:
    """`wap --help`: Start (init, setup, doctor, demo) before Run (run first), then Look, Review, Fix and undo,
    Operate; every command is in one of them (a new command without a panel fails here and in the docs build)."""
    import typer

    from wapflow._docs import cli_commands
    from wapflow.cli.root import PANELS

    out = runner.invoke(app, ["--help"], terminal_width=200).output
    heads = [line.split("─ ", 1)[1].split(" ─")[0] for line in out.splitlines() if line.startswith("╭─ ")]
    assert heads == ["Options", *PANELS], heads
    start = out.index("─ Start ")
    assert start < out.index("│ init ") < out.index("│ setup ") < out.index("─ Run ") < out.index("│ run ")
    assert out.index("│ run ") < out.index("│ run-tables ")
    root = typer.main.get_command(app)
    assert {getattr(c, "rich_help_panel", None) for c in root.commands.values()} == set(PANELS)  # type: ignore[attr-defined]
    assert [p for p, _ in cli_commands()][:4] == ["wap init", "wap setup", "wap doctor", "wap demo"]


def test_version_prints_the_installed_version_and_exits_0() -> None:
    from wapflow import __version__

    r = subprocess.run([WAP, "--version"], capture_output=True, text=True, check=False, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == f"wapflow {__version__}", (r.stdout, r.stderr)
    assert "--version" in wap("--help").output
