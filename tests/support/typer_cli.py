"""The `wap` command in this process (Typer's CliRunner) on a wap.toml of the README's checks, and the
environment for a `wap` process of its own: the CLI tests of every layer share them."""

from __future__ import annotations

import json
import os
from pathlib import Path

from typer.testing import CliRunner

from support.data import TRIPS_CHECKS
from wapflow.cli import app

runner = CliRunner()


def _toml_value(v):
    return json.dumps(v)


def write_config(tmp: Path, catalog: str, checks=TRIPS_CHECKS, extra: str = "") -> Path:
    lines = [
        "[lakehouse]",
        f'warehouse = "{tmp / "lakehouse"}"',
        f'catalog_name = "{catalog}"',
        'master = "local[2]"',
        extra,
        '[tables."nyc.trips"]',
        "checks = [",
    ]
    for c in checks:
        inner = ", ".join(f"{k} = {_toml_value(v)}" for k, v in c.items())
        lines.append(f"  {{ {inner} }},")
    lines.append("]")
    p = tmp / "wap.toml"
    p.write_text("\n".join(lines) + "\n")
    return p


def wap(*args: str):
    res = runner.invoke(app, list(args))
    return res


def as_json(res) -> dict:
    return json.loads(res.stdout)


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without PYSPARK_* settings (a `wap` process as a user starts it), with the JVM options of
    the tests' `wap` processes (support.cli_harness.fast_start_jvm(): a JVM that lives for seconds starts sooner)."""
    from support import cli_harness

    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK")}
    env.setdefault("JAVA_TOOL_OPTIONS", cli_harness.fast_start_jvm())
    env.update(extra)
    return env
