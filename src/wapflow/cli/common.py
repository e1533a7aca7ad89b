"""What most commands share: the --config and --json options, and opening what --config names.

Opening is lazy (imports inside the functions) so that `wap runs` and `wap --help` never load Spark.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from wapflow.cli.output import Output
from wapflow.errors import WapError

if TYPE_CHECKING:
    from wapflow.lakehouse.lakehouse import Lakehouse
    from wapflow.runs.store import RunStore

T = TypeVar("T")

ConfigOpt = Annotated[
    str | None, typer.Option("--config", "-c", help="wap.toml to use (default: $WAP_CONFIG, then ./wap.toml).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout instead of tables.")]
WithinOpt = Annotated[
    str, typer.Option("--within", help="What failed this recently is sent again (a duration: 12h, 1d, 7d, 2w).")
]


def window(within: str) -> timedelta:
    """A `--within` duration (wapflow.vocabulary's grammar); a ConfigError (exit 2) naming it otherwise."""
    from wapflow.errors import ConfigError
    from wapflow.vocabulary import parse_duration

    try:
        return timedelta(seconds=parse_duration(within))
    except ValueError as e:
        raise ConfigError(f"--within {within!r}: {e}", hint="a duration such as 12h, 1d or 7d") from None


def open_lakehouse(config: str | None, output: Output) -> Lakehouse:
    """The lakehouse of wap.toml; Spark starts on first use and reports its progress through `output`."""
    from wapflow import api

    return api.connect(config, progress=output.progress, meter=output.meter())


def on_lakehouse(config: str | None, output: Output, work: Callable[[Lakehouse], T]) -> T:
    """`work` on the lakehouse of wap.toml; a WapError (opening it or in `work`) ends the command with its
    one error block and exit code."""
    try:
        return work(open_lakehouse(config, output))
    except WapError as e:
        output.fail(e)


def open_store(config: str | None) -> RunStore:
    """The run store of wap.toml alone (no Spark): enough for `wap runs` and `wap report`."""
    from wapflow.config import load_config
    from wapflow.runs.store import RunStore

    return RunStore(load_config(config).run_store_url())
