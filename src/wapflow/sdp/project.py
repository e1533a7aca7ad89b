"""A Spark Declarative Pipelines project as wapflow reads it: its spec (`spark-pipeline.yml`), found as
`spark-pipelines` finds it, and its datasets as its files declare them.

The definitions are registered with Spark's own registry (the graph lives in the Spark Connect server, as with
`spark-pipelines run`); `Recording` stands in front of it and notes each dataset (its kind, where it is declared,
the checks marked on its function), and adds `write.wap.enabled` to every table a Python file declares, so its
writes go to the run's branch. SQL files are registered as they are; the names they create are noted from their
CREATE statements (the session's table default covers the tables they create).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from wapflow.errors import UsageError
from wapflow.lakehouse.model import WAP_ENABLED_PROP
from wapflow.sdp.expectations import checks_of

SPEC_NAMES = ("spark-pipeline.yml", "spark-pipeline.yaml")
# The datasets a SQL file creates: CREATE [OR REFRESH] MATERIALIZED VIEW | STREAMING TABLE | TABLE name.
_SQL_DATASET = re.compile(
    r"\bCREATE\s+(?:OR\s+REFRESH\s+)?(MATERIALIZED\s+VIEW|STREAMING\s+TABLE|TABLE)\s+(?:IF\s+NOT\s+EXISTS\s+)?"
    r"((?:`[^`]+`|[\w]+)(?:\.(?:`[^`]+`|[\w]+))*)",
    re.IGNORECASE,
)


@dataclass
class Dataset:
    """One dataset of the project that Iceberg stores (temporary views and sinks are not tables)."""

    name: str  # as declared: orders, sales.orders or catalog.sales.orders
    kind: str  # materialized_view | table | streaming_table
    where: str  # file:line
    checks: list[dict[str, Any]] = field(default_factory=list)  # marked in the code (wapflow.expect)


@dataclass
class Project:
    spec_path: Path
    name: str
    storage: str
    catalog: str | None
    database: str | None
    configuration: dict[str, str]
    spec: Any  # pyspark's PipelineSpec, for its own register_definitions
    datasets: dict[str, Dataset] = field(default_factory=dict)

    @property
    def root(self) -> Path:
        return self.spec_path.parent


def find_spec(spec: str | Path | None, cwd: Path | None = None) -> Path:
    """The spec named, or the one in the folder (or its parents), as `spark-pipelines` looks for it."""
    if spec is not None:
        path = Path(spec).expanduser()
        if path.is_dir():
            return find_spec(None, path)
        if not path.is_file():
            raise UsageError(f"no pipeline spec at {path}", hint="pass --spec PATH to a spark-pipeline.yml")
        return path.resolve()
    here = (cwd or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        found = [folder / n for n in SPEC_NAMES if (folder / n).is_file()]
        if len(found) > 1:
            raise UsageError(f"{folder} holds both {SPEC_NAMES[0]} and {SPEC_NAMES[1]}", hint="keep one of them")
        if found:
            return found[0]
    raise UsageError(
        f"no {SPEC_NAMES[0]} in {here} or its parents",
        hint="run in the pipeline's folder, pass --spec PATH, or start one with `spark-pipelines init --name NAME`",
    )


def load(spec_path: Path) -> Project:
    """The spec read by pyspark's own loader; its errors said as one line naming the file."""
    from pyspark.errors import PySparkException
    from pyspark.pipelines.cli import load_pipeline_spec

    try:
        spec = load_pipeline_spec(spec_path)
    except PySparkException as e:
        raise UsageError(
            f"{spec_path}: {_one_line(str(e))}",
            hint="fix the spec (fields: name, storage, catalog, database, configuration, libraries)",
        ) from None
    except Exception as e:  # noqa: BLE001 - YAML syntax, a wrong type: the file is wrong, said as such
        raise UsageError(f"{spec_path} is not a pipeline spec: {_one_line(str(e))}", hint="fix its YAML") from None
    storage = spec.storage
    if "://" not in storage:
        # SDP wants a URI; a relative folder means one beside the spec (as a user writes it in a project).
        storage = (spec_path.parent / storage).resolve().as_uri()
        # Not dataclasses.replace: PipelineSpec's __post_init__ would refuse the globs it normalized itself.
        object.__setattr__(spec, "storage", storage)
    return Project(
        spec_path=spec_path,
        name=spec.name,
        storage=storage,
        catalog=spec.catalog,
        database=spec.database,
        configuration=dict(spec.configuration),
        spec=spec,
    )


def _one_line(text: str) -> str:
    return " ".join(text.split("\nJVM stacktrace:")[0].split())


def _kind(output: Any) -> str | None:
    from pyspark.pipelines.output import MaterializedView, StreamingTable, Table

    if isinstance(output, MaterializedView):
        return "materialized_view"
    if isinstance(output, StreamingTable):
        return "streaming_table"
    if isinstance(output, Table):
        return "table"
    return None  # a temporary view or a sink: no Iceberg table


def recording(inner: Any, project: Project) -> Any:
    """Spark's registry, with `project.datasets` filled as the files register (see the module's doc)."""
    from pyspark.pipelines.graph_element_registry import GraphElementRegistry

    class Recording(GraphElementRegistry):
        def register_output(self, output: Any) -> None:
            kind = _kind(output)
            if kind is not None:
                loc = output.source_code_location
                project.datasets.setdefault(
                    output.name, Dataset(output.name, kind, f"{loc.filename}:{loc.line_number}")
                )
                output = replace(output, table_properties={**dict(output.table_properties), WAP_ENABLED_PROP: "true"})
            inner.register_output(output)

        def register_flow(self, flow: Any) -> None:
            marked = checks_of(flow.func)
            if marked:
                ds = project.datasets.get(flow.target)
                if ds is None:
                    loc = flow.source_code_location
                    raise UsageError(
                        f"{loc.filename}:{loc.line_number}: checks on flow {flow.name} of {flow.target}, which is "
                        "not a table this project declares in Python",
                        hint="put wapflow.expect on the dataset's own function, or its checks in wap.toml",
                    )
                ds.checks.extend(marked)
            inner.register_flow(flow)

        def register_sql(self, sql_text: str, file_path: Path) -> None:
            for m in _SQL_DATASET.finditer(sql_text):
                kind = {"materialized": "materialized_view", "streaming": "streaming_table"}.get(
                    m.group(1).split()[0].lower(), "table"
                )
                line = sql_text.count("\n", 0, m.start()) + 1
                name = m.group(2).replace("`", "")
                project.datasets.setdefault(name, Dataset(name, kind, f"{file_path}:{line}"))
            inner.register_sql(sql_text, file_path)

    return Recording()
