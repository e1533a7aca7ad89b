"""Models: the tables wap.toml derives from others ([models."ns.table"], wapflow.config.models), run upstream
first inside one transaction, so every model's output is audited and all are published in one commit, or none.

A model reads its inputs as the transaction sees them: a table written earlier in the same run is read staged
(its main plus what the run wrote), any other at its main. An `incremental` model reads only what each input
gained since the model last read it: its commits record, per input, the snapshot it read up to
(MODEL_INPUT_PROP_PREFIX), and the next run reads from there (Iceberg's incremental read of appends).

SQL runs with each table it names swapped for a temporary view of that input (checked read-only again by
Spark's own parser); a Python model is called as `function(spark, inputs)` and must return a DataFrame.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from wapflow.config.models import ModelConfig, downstream_models, model_order
from wapflow.errors import ConfigError, InputError, UsageError, WapError
from wapflow.lakehouse.model import MODEL_INPUT_PROP_PREFIX
from wapflow.pipeline.opengroup import OpenGroup
from wapflow.pipeline.state import new_run_id, validate_run_id
from wapflow.pipeline.transaction import Transaction, query_over
from wapflow.spark import errors as spark_errors
from wapflow.sql.identifiers import TableName

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from wapflow.lakehouse.lakehouse import Lakehouse
    from wapflow.pipeline.result import MultiRunResult


def run_models(
    lh: Lakehouse, names: list[str] | None = None, *, run_id: str | None = None, no_checks: bool = False
) -> MultiRunResult:
    """Run the models named (every model when None) and every model downstream of them, upstream first, in one
    transaction: all published in one commit, or none. A model that fails fails the run, naming the model."""
    models = lh.config.models
    if not models:
        raise UsageError(
            f'no [models."ns.table"] section in {lh.config.source or "the configuration"}',
            hint='declare one, e.g. [models."silver.trips"] with sql = "SELECT * FROM raw.trips WHERE fare > 0"',
        )
    order = model_order(models, names)
    rid = validate_run_id(run_id) if run_id else new_run_id()
    tx = Transaction(OpenGroup(lh, run_id=rid, no_checks=no_checks))
    return _run_in(tx, order)


def run_batch(
    lh: Lakehouse, table: str, uris: Sequence[str], *, run_id: str, source: str | None, no_checks: bool = False
) -> MultiRunResult:
    """A source's landed batch and every model downstream of its table, in one transaction: the files written
    first, each model then reading them staged, all audited, and published in one commit or none."""
    group = OpenGroup(lh, run_id=run_id, no_checks=no_checks)
    try:
        group.add_files(table, uris, source=source)
    except WapError:
        assert group.outcome is not None  # the run recorded the failure of the batch's write
        return group.outcome
    return _run_in(Transaction(group), downstream_models(lh.config.models, table))


def _run_in(tx: Transaction, order: list[str]) -> MultiRunResult:
    models = tx.lh.config.models
    for name in order:
        tx.lh.progress(f"model {name}")
        try:
            write_model(tx, name, models[name])
        except Exception as e:  # noqa: BLE001 - the run ends failed, naming the model (recorded, returned)
            if tx.ended is not None:
                return tx.ended  # failed while writing: the run recorded it already
            err = e if isinstance(e, WapError) else _raised(name, e)
            if tx.has_written(name):
                return tx.abandon(err)
            return tx.fail_table(name, err)
    return tx.finish()


def write_model(tx: Transaction, name: str, model: ModelConfig) -> None:
    """Compute one model from its inputs as `tx` sees them and write it in `tx`."""
    inputs, read_up_to = _inputs(tx, name, model)
    df = _sql(tx, name, model, inputs) if model.sql is not None else _python(tx, name, model, inputs)
    props = {f"{MODEL_INPUT_PROP_PREFIX}{t}": str(s) for t, s in read_up_to.items() if s is not None}
    tx.write(name, df, checks=model.checks, properties=props, **model_write(tx.lh, name, model))


def model_write(lh: Lakehouse, name: str, model: ModelConfig) -> dict[str, Any]:
    """How a model's rows change its table: the model's mode and keys, else its table section's. With neither,
    a model computed from all of its inputs' rows is the whole table (replaced, so a second run does not add
    its rows again), and an incremental one adds what its inputs gained (append)."""
    settings = model.write_settings()
    section = lh.config.tables.get(name)
    if "mode" in settings or (section is not None and "mode" in section.model_fields_set) or model.incremental:
        return settings
    return {**settings, "mode": "replace", "replace_where": "true"}


def _inputs(tx: Transaction, name: str, model: ModelConfig) -> tuple[dict[str, DataFrame], dict[str, int | None]]:
    """Each input as the model reads it, and the snapshot of each it reads up to."""
    lh = tx.lh
    dfs: dict[str, DataFrame] = {}
    heads: dict[str, int | None] = {}
    for t in model.inputs():
        table = TableName.parse(t)
        if not tx.has_written(t) and not lh.tables.exists(table):
            raise ConfigError(
                f"model {name} reads {t}, which is neither a table of the catalog nor a model run before it",
                hint=f"create {t} first (wap run / wap ingest), or fix the model's sql or depends_on",
            )
        wt, ref = tx.view_of(t)
        head = wt.head(table, ref)
        heads[t] = head
        if not model.incremental:
            dfs[t] = tx.read(t)
            continue
        start = _last_read(lh, TableName.parse(name), t)
        if start is None or head is None:
            dfs[t] = tx.read(t)  # never read before: all of it
        elif start == head:
            dfs[t] = tx.read(t).limit(0)  # nothing new since the last run
        else:
            try:
                dfs[t] = wt.read_increment(table, start, head)
                dfs[t].schema  # noqa: B018 - Iceberg plans the increment here: a non-append history fails now
            except Exception as e:
                raise ConfigError(
                    f"incremental model {name} cannot read only the new rows of {t} (snapshots {start} to {head}): "
                    f"{spark_errors.describe(e)}",
                    hint="an input whose rows were rewritten (merge, replace, compaction) has no append-only "
                    "increment: set incremental = false, or run the model once in full",
                ) from e
    return dfs, heads


def _last_read(lh: Lakehouse, model_table: TableName, input_table: str) -> int | None:
    """The snapshot of `input_table` the model's main last read up to (none: never read, or no table yet)."""
    meta = lh.metadata
    if not meta.exists(model_table):
        return None
    snaps = meta.snapshots(model_table)
    for s in meta.ancestry(snaps, meta.head(model_table, "main")):
        read = s.summary.get(f"{MODEL_INPUT_PROP_PREFIX}{input_table}")
        if read is not None:
            return int(read)
    return None


def _sql(tx: Transaction, name: str, model: ModelConfig, inputs: dict[str, DataFrame]) -> DataFrame:
    assert model.sql is not None

    def frame_of(parts: tuple[str, ...]) -> DataFrame:
        dotted = ".".join(parts[-2:])
        if dotted not in inputs:
            raise ConfigError(
                f"model {name}'s sql reads {dotted}, which its depends_on does not list",
                hint="list every table the sql reads in depends_on, or leave depends_on out (inferred from the sql)",
            )
        return inputs[dotted]

    return query_over(
        tx.lh.spark,
        model.sql,
        f"model {name}: its sql",
        frame_of,
        hint="the line and position are those of the model's sql in wap.toml (its tables read as views)",
    )


def _python(tx: Transaction, name: str, model: ModelConfig, inputs: dict[str, DataFrame]) -> DataFrame:
    from pyspark.sql import DataFrame as ClassicFrame

    assert model.python is not None
    module_name, _, func_name = model.python.partition(":")
    try:
        func = getattr(importlib.import_module(module_name), func_name)
    except (ImportError, AttributeError) as e:
        raise ConfigError(
            f'model {name}: python = "{model.python}" cannot be loaded: {e}',
            hint="the module must be importable where wap runs (installed, or on PYTHONPATH)",
        ) from e
    try:
        out = func(tx.lh.spark, inputs)
    except Exception as e:
        raise InputError(
            f"model {name}: {model.python} raised {type(e).__name__}: {e}",
            hint="fix the model's code; nothing was published",
        ) from e
    if not isinstance(out, ClassicFrame) and type(out).__name__ != "DataFrame":  # (a Spark Connect one too)
        raise ConfigError(
            f"model {name}: {model.python} returned {type(out).__name__}, not a DataFrame",
            hint="a python model returns the table's rows as a Spark DataFrame",
        )
    frame: DataFrame = out
    return frame


def _raised(name: str, e: BaseException) -> WapError:
    return InputError(f"model {name} raised {type(e).__name__}: {e}", hint="fix it; nothing was published")
