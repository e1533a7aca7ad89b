"""What most commands share: the --config and --json options, and opening what --config names.

Opening is lazy (imports inside the functions) so that `wap runs` and `wap --help` never load Spark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from wapflow.cli.output import Output

if TYPE_CHECKING:
    from wapflow.lakehouse.lakehouse import Lakehouse
    from wapflow.runs.store import RunStore

ConfigOpt = Annotated[
    str | None, typer.Option("--config", "-c", help="wap.toml to use (default: $WAP_CONFIG, then ./wap.toml).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout instead of tables.")]


def open_lakehouse(config: str | None, output: Output) -> Lakehouse:
    """The lakehouse of wap.toml; Spark starts on first use and reports its progress through `output`."""
    from wapflow import api

    return api.connect(config, progress=output.progress)


def open_store(config: str | None) -> RunStore:
    """The run store of wap.toml alone (no Spark): enough for `wap runs` and `wap report`."""
    from wapflow.config import load_config
    from wapflow.runs.store import RunStore

    return RunStore(load_config(config).run_store_url())
