"""`wap init` and `wap setup`: a starter wap.toml, and Java plus the JVM jars checked before the first run."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from wapflow.cli.common import ConfigOpt, JsonOpt
from wapflow.cli.output import Output, out
from wapflow.errors import ConfigError, WapError


def init(
    path: Annotated[Path, typer.Option("--path", help="Where to write the file.")] = Path("wap.toml"),
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write a commented starter wap.toml."""
    from wapflow.config import STARTER

    if path.exists() and not force:
        Output(as_json=False).fail(ConfigError(f"{path} already exists", hint="use --force to overwrite it"))
    path.write_text(STARTER, encoding="utf-8")
    out.print(f"wrote {path}")
    out.print("next: declare your tables and their checks in it; docs/tutorial.md walks through a first run")


def setup(
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
    s3: Annotated[bool, typer.Option("--s3", help="Also fetch the S3 jars (automatic when wap.toml uses S3).")] = False,
    archive: Annotated[
        bool,
        typer.Option(
            "--class-archive/--no-class-archive",
            help="Make the JVM class archive (a short training run, once per Java and PySpark install) that makes "
            "every later Spark start faster.",
        ),
    ] = True,
) -> None:
    """Check Java, fetch the JVM jars (Iceberg runtime, SQLite JDBC; S3 ones if used) and make the JVM class
    archive, so later runs never stall and start faster."""
    from wapflow.config import load_config
    from wapflow.lakehouse import class_archive, jvm

    o = Output(as_json)
    try:
        cfg = load_config(config)
        major = jvm.check_java()
        plan = jvm.plan_for(cfg, o.progress, s3=s3)
    except WapError as e:
        o.fail(e)
    made: tuple[Path | None, str] = (None, "not asked (--no-class-archive)")
    if archive:
        made = class_archive.ensure(cfg, [sys.executable, "-m", "wapflow.cli.train_archive"], o.progress)

    def show() -> None:
        out.print(f"Java {major}: ok")
        for j in plan.jars:
            out.print(f"jar: {j}")
        for p in plan.packages:
            out.print(f"package (resolved by Spark/Ivy at start): {p}")
        where, what = made
        out.print(f"class archive: {where} ({what})" if where else f"class archive: none: {what}")

    doc = {
        "java": major,
        "jars": list(plan.jars),
        "packages": list(plan.packages),
        "class_archive": {"path": str(made[0]) if made[0] else None, "state": made[1]},
    }
    o.result(doc, show)
