"""The bad-input matrix: what real pipelines hand wapflow, through `wap run` in real processes.

Every case runs `wap` as a person would (its own process, its own JVM when it gets that far) against
one lakehouse seeded with parquet, CSV and JSON tables, and asserts what a person would check:
- the exit code, and one `error:` block on stderr naming the file or name at fault, with no Python
  traceback, Java frames or Spark log lines (those go to the log file the error names);
- with --json (every other case), `status`, `error.kind` and `error.exit_code`;
- main's snapshot id and rows, read back with PyIceberg (not wapflow), unchanged on failure, and on
  success exactly the rows of the named files, per file;
- the source file's bytes unchanged; the run recorded in the run store (read with sqlite3).
Cases that read fine (odd but legal names) must publish exactly their rows. Groups: names, formats,
schema drift per format, identifiers, check declarations, configuration, run ids. SIGKILL at each
step is tests/process/test_crash_resume.py; concurrent processes are at the end of this file.

Where a case runs: every case that ends before Spark starts (identifiers, check declarations,
configuration, names refused by the file checks) and one case per group that needs Spark run as their
own `wap` process, so the terminal a person sees is what is asserted. On the lakehouse's own wap.toml those
processes hand their command to one warm engine (wapflow.engine), as a person's `wap` does by default: the
client's stdout, stderr and exit code are what is asserted, without a JVM start per case; a case with a
wap.toml of its own runs with its own JVM (WAP_ENGINE=off), and so do the concurrent processes at the end,
where no JVM log line may reach stderr either. The other Spark cases (IN_PROCESS below) run the same `wap`
command line through the CLI in this test process, on the session's JVM: the same parsing, errors and
rendering. Their stderr is Python's only.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from support.cli_harness import WAP, Proc, Reader, env, setup_run, wap, write_config
from support.data import write_parquet
from support.engines import engine_runtime
from wapflow.demo.generate import generate_trips

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CATALOG = f"matrix{os.getpid()}"
TRIPS_CHECKS = (
    '[{ check = "not_null", column = "passenger_count" }, { check = "unique", columns = ["trip_id"] },'
    ' { check = "accepted_values", column = "payment_type", values = [1, 2, 3, 4, 5, 6] }]'
)
TABLES = f"""
[tables."nyc.trips"]
checks = {TRIPS_CHECKS}

[tables."raw.people"]
format = "csv"
checks = []

[tables."raw.events"]
format = "json"
checks = []

[tables."nyc.uniq"]
checks = [{{ check = "unique_in_table", columns = ["trip_id"] }}]
"""
PEOPLE_CSV = "id,score,name\n1,2.5,ann\n2,3.5,bob\n"
EVENTS_JSON = '{"id": 1, "kind": "click", "amount": 1.5}\n{"id": 2, "kind": "view", "amount": 0.0}\n'


@dataclass
class Lake:
    folder: Path
    cfg: Path
    reader: Reader
    engine: dict[str, str]  # the environment of `wap` processes served by the lakehouse's warm engine
    n: int = 0

    def next_id(self) -> int:
        self.n += 1
        return self.n

    def run_status(self, run_id: str) -> str | None:
        db = self.folder / "lakehouse" / "wapflow_runs.db"
        with sqlite3.connect(db) as conn:
            row = conn.execute("SELECT status FROM wap_runs WHERE run_id = ?", (run_id,)).fetchone()
        return row[0] if row else None


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, spark) -> Iterator[Lake]:
    from wapflow.config import load_config
    from wapflow.lakehouse.lakehouse import Lakehouse
    from wapflow.pipeline import run_wap

    folder = tmp_path_factory.mktemp("matrix")
    cfg = write_config(folder, TABLES, catalog=CATALOG)
    lh = Lakehouse(load_config(cfg), spark=spark)
    seed = folder / "seed"
    seed.mkdir()
    trips = write_parquet(seed / "trips.parquet", generate_trips(50, start_id=1))
    (seed / "people.csv").write_text(PEOPLE_CSV)
    (seed / "events.json").write_text(EVENTS_JSON)
    uniq = write_parquet(seed / "uniq.parquet", generate_trips(10, start_id=1))
    for table, f in (
        ("nyc.trips", trips),
        ("raw.people", seed / "people.csv"),
        ("raw.events", seed / "events.json"),
        ("nyc.uniq", uniq),
    ):
        res = run_wap(lh, table, [str(f)])
        assert res.status == "published", res.message
    with engine_runtime() as runtime:  # its engine stopped, with its JVM, after the module
        yield Lake(folder, cfg, Reader(folder, CATALOG), {"XDG_RUNTIME_DIR": str(runtime), "WAP_ENGINE": "auto"})


# --- case definitions ----------------------------------------------------------------------------

Files = Callable[[Path], list[str]]


@dataclass
class Case:
    id: str
    table: str
    files: Files  # makes the inputs in a fresh folder; returns the arguments naming them
    code: int
    words: list[str] = field(default_factory=list)  # in the message (stderr, or the JSON error)
    expect: Callable[[Path], list[dict[str, Any]]] | None = None  # rows a publish must add, per case
    args: list[str] = field(default_factory=list)
    config: str | None = None  # extra wap.toml text replacing the tables (check declarations, config)
    recorded: bool = True  # a run record exists (not for errors found while loading the config)


_start = iter(range(1_000_000, 100_000_000, 10_000))


def trips(n: int = 20, **kw: Any) -> pa.Table:
    return generate_trips(n, start_id=next(_start), **kw)


def pq_file(name: str, table: pa.Table | None = None) -> Files:
    def make(d: Path) -> list[str]:
        return [str(write_parquet(d / name, table if table is not None else trips()))]

    return make


def pq_rows(*names: str) -> Callable[[Path], list[dict[str, Any]]]:
    return lambda d: [r for n in names for r in pq.read_table(d / n).to_pylist()]


def text_file(name: str, content: str | bytes) -> Files:
    def make(d: Path) -> list[str]:
        p = d / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
        return [str(p)]

    return make


def several(*makers: Files, args: list[str] | None = None) -> Files:
    def make(d: Path) -> list[str]:
        named = [a for m in makers for a in m(d)]
        return args if args is not None else named

    return make


def glob_of(pattern: str, *makers: Files) -> Files:
    return several(*makers, args=[pattern])


def _at(d: Path, rel: str) -> Callable[[Path], list[str]]:
    return lambda _d: [str(d / rel)]


def spark_output(folder: str) -> Files:
    """What a Spark/Hadoop job leaves: part files, _SUCCESS, .crc sidecars."""

    def make(d: Path) -> list[str]:
        out = d / folder
        write_parquet(out / "part-00000-abc.snappy.parquet", trips(15))
        write_parquet(out / "part-00001-abc.snappy.parquet", trips(15))
        (out / "_SUCCESS").write_bytes(b"")
        (out / ".part-00000-abc.snappy.parquet.crc").write_bytes(b"crc\x00")
        return [str(out)]

    return make


def spark_output_rows(folder: str) -> Callable[[Path], list[dict[str, Any]]]:
    return lambda d: [r for p in sorted((d / folder).glob("part-*.parquet")) for r in pq.read_table(p).to_pylist()]


def symlink_loop(d: Path) -> list[str]:
    (d / "loop_a.parquet").symlink_to(d / "loop_b.parquet")
    (d / "loop_b.parquet").symlink_to(d / "loop_a.parquet")
    return [str(d / "loop_a.parquet")]


def dangling(d: Path) -> list[str]:
    (d / "gone.parquet").symlink_to(d / "never_there.parquet")
    return [str(d / "gone.parquet")]


def truncated(d: Path) -> list[str]:
    good = write_parquet(d / "whole.parquet", trips(200))
    p = d / "truncated.parquet"
    p.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    good.unlink()
    return [str(p)]


def null_typed(d: Path) -> list[str]:
    t = trips(10)
    i = t.schema.get_field_index("passenger_count")
    t = t.set_column(i, "passenger_count", pa.nulls(10, pa.null()))
    return [str(write_parquet(d / "nulltyped.parquet", t))]


def retyped(d: Path) -> list[str]:
    t = trips(10)
    i = t.schema.get_field_index("passenger_count")
    t = t.set_column(i, "passenger_count", pa.array(["two"] * 10))
    return [str(write_parquet(d / "retyped.parquet", t))]


def csv_rows(name: str) -> Callable[[Path], list[dict[str, Any]]]:
    import csv

    def rows(d: Path) -> list[dict[str, Any]]:
        with open(d / name, newline="", encoding="utf-8-sig") as f:
            return [{"id": int(r["id"]), "score": float(r["score"]), "name": r["name"]} for r in csv.DictReader(f)]

    return rows


def json_rows(name: str) -> Callable[[Path], list[dict[str, Any]]]:
    def rows(d: Path) -> list[dict[str, Any]]:
        text = (d / name).read_text()
        data = json.loads(text) if text.lstrip().startswith("[") else [json.loads(x) for x in text.splitlines() if x]
        return [{"id": r["id"], "kind": r["kind"], "amount": float(r["amount"])} for r in data]

    return rows


def bad_check(check: str) -> str:
    return f'[tables."nyc.trips"]\nchecks = [{check}]\n'


LONG = "t" * 300
CASES: list[Case] = [
    # --- names: legal but odd names are read as exactly those files --------------------------
    Case("name-brackets-alone", "nyc.trips", pq_file("batch[1].parquet"), 0, expect=pq_rows("batch[1].parquet")),
    Case(
        "name-brackets-beside-lookalike",
        "nyc.trips",
        lambda d: [pq_file("batch1.parquet")(d), pq_file("batch[1].parquet")(d)][1],
        0,
        expect=pq_rows("batch[1].parquet"),
    ),
    Case("name-underscore", "nyc.trips", pq_file("_late.parquet"), 0, expect=pq_rows("_late.parquet")),
    Case("name-dot", "nyc.trips", pq_file(".early.parquet"), 0, expect=pq_rows(".early.parquet")),
    Case(
        "name-glob-over-underscore",
        "nyc.trips",
        lambda d: glob_of(str(d / "g" / "*.parquet"), pq_file("g/a.parquet"), pq_file("g/_b.parquet"))(d),
        0,
        expect=pq_rows("g/a.parquet", "g/_b.parquet"),
    ),
    Case("name-space", "nyc.trips", pq_file("with space.parquet"), 0, expect=pq_rows("with space.parquet")),
    Case(
        "name-colon",
        "nyc.trips",
        pq_file("export_2026-01-01T10:00:00.parquet"),
        0,
        expect=pq_rows("export_2026-01-01T10:00:00.parquet"),
    ),
    Case(
        "name-unicode",
        "nyc.trips",
        pq_file("café_données_東京.parquet"),
        0,
        expect=pq_rows("café_données_東京.parquet"),
    ),
    Case("name-percent", "nyc.trips", pq_file("pct%20x.parquet"), 0, expect=pq_rows("pct%20x.parquet")),
    Case("name-hash", "nyc.trips", pq_file("hash#1.parquet"), 0, expect=pq_rows("hash#1.parquet")),
    Case("name-star-literal", "nyc.trips", pq_file("star*.parquet"), 0, expect=pq_rows("star*.parquet")),
    Case("name-question-literal", "nyc.trips", pq_file("q?.parquet"), 0, expect=pq_rows("q?.parquet")),
    Case("name-braces", "nyc.trips", pq_file("b{1,2}.parquet"), 0, expect=pq_rows("b{1,2}.parquet")),
    Case(
        "name-partition-dir",
        "nyc.trips",
        pq_file("dt=2026-01-01/part-0.parquet"),
        0,
        expect=pq_rows("dt=2026-01-01/part-0.parquet"),
    ),
    Case(
        "name-spark-output-folder", "nyc.trips", spark_output("out"), 0, ["_SUCCESS"], expect=spark_output_rows("out")
    ),
    Case(
        "name-spark-output-glob",
        "nyc.trips",
        lambda d: glob_of(str(d / "out2" / "*"), spark_output("out2"))(d),
        0,
        ["_SUCCESS"],
        expect=spark_output_rows("out2"),
    ),
    # --- names that cannot be read: refused, naming the file ------------------------------------
    Case("name-missing", "nyc.trips", lambda d: [str(d / "nope.parquet")], 2, ["nope.parquet", "does not exist"]),
    Case("name-glob-matches-nothing", "nyc.trips", lambda d: [str(d / "none" / "*.parquet")], 2, ["no file matches"]),
    Case("name-empty-file", "nyc.trips", text_file("empty.parquet", b""), 3, ["empty.parquet", "empty"]),
    Case("name-success-marker-named", "nyc.trips", text_file("_SUCCESS", b""), 3, ["_SUCCESS"]),
    Case("name-symlink-loop", "nyc.trips", symlink_loop, 3, ["loop_a.parquet", "symbolic link loop"]),
    Case("name-dangling-symlink", "nyc.trips", dangling, 3, ["gone.parquet"]),
    Case(
        "name-empty-folder", "nyc.trips", lambda d: [str((d / "emptydir").mkdir() or d / "emptydir")], 3, ["emptydir"]
    ),
    Case("parquet-truncated", "nyc.trips", truncated, 3, ["truncated.parquet", "parquet"]),
    Case(
        "parquet-is-csv",
        "nyc.trips",
        text_file("really_csv.parquet", "a,b\n1,2\n" * 5),
        3,
        ["really_csv.parquet", "parquet"],
    ),
    Case("parquet-no-extension", "nyc.trips", text_file("data.bin", b"PAR1xxxxPAR1"), 2, ["data.bin", "format"]),
    # --- CSV ------------------------------------------------------------------------------------
    Case("csv-semicolon", "raw.people", text_file("semi.csv", "id;score;name\n3;1.5;cy\n"), 3, ["semi.csv", "sep"]),
    Case(
        "csv-excel-bom-semicolon",
        "raw.people",
        text_file("excel.csv", "\ufeffid;score;name\r\n3;1,5;cy\r\n"),
        3,
        ["excel.csv", "sep"],
    ),
    Case(
        "csv-bom-comma",
        "raw.people",
        text_file("bom.csv", "\ufeffid,score,name\r\n4,1.5,dee\r\n"),
        0,
        expect=csv_rows("bom.csv"),
    ),
    Case(
        "csv-ragged-long",
        "raw.people",
        text_file("long.csv", "id,score,name\n5,1.0,eve\n6,2.0,fay,extra\n"),
        3,
        ["long.csv"],
    ),
    Case(
        "csv-ragged-short", "raw.people", text_file("short.csv", "id,score,name\n7,1.0,gus\n8,2.0\n"), 3, ["short.csv"]
    ),
    Case("csv-binary", "raw.people", text_file("binary.csv", bytes(range(256)) * 4), 3, ["binary.csv", "text"]),
    Case(
        "csv-cp1252",
        "raw.people",
        text_file("cp.csv", "id,score,name\n9,1.0,Jos\xe9\n".encode("cp1252")),
        3,
        ["cp.csv", "encoding"],
    ),
    Case(
        "csv-mistyped", "raw.people", text_file("typed.csv", "id,score,name\n10,high,hal\n"), 3, ["typed.csv", "high"]
    ),
    Case(
        "csv-duplicate-header",
        "raw.people",
        text_file("dup.csv", "id,score,score\n11,1.0,2.0\n"),
        3,
        ["dup.csv", "score"],
    ),
    Case(
        "csv-extra-column",
        "raw.people",
        text_file("wide.csv", "id,score,name,age\n12,1.0,ida,40\n"),
        1,
        ["wide.csv", "age"],
    ),
    Case("csv-missing-column", "raw.people", text_file("narrow.csv", "id,score\n13,1.0\n"), 1, ["narrow.csv", "name"]),
    # --- JSON -----------------------------------------------------------------------------------
    Case(
        "json-extra-field",
        "raw.events",
        text_file("extra.json", '{"id": 3, "kind": "x", "amount": 1.0, "secret": 1}\n'),
        1,
        ["extra.json", "secret"],
    ),
    Case(
        "json-missing-field",
        "raw.events",
        text_file("missing.json", '{"id": 4, "kind": "x"}\n'),
        1,
        ["missing.json", "amount"],
    ),
    Case(
        "json-mistyped",
        "raw.events",
        text_file("mistyped.json", '{"id": "five", "kind": "x", "amount": 1.0}\n'),
        3,
        ["mistyped.json"],
    ),
    Case("json-not-json", "raw.events", text_file("notjson.json", "id,kind,amount\n6,x,1.0\n"), 3, ["notjson.json"]),
    Case(
        "json-truncated-line",
        "raw.events",
        text_file("cut.json", '{"id": 7, "kind": "x", "amount": 1.0}\n{"id": 8, "ki'),
        3,
        ["cut.json"],
    ),
    Case(
        "json-api-array",
        "raw.events",
        text_file(
            "api.json",
            json.dumps([{"id": 9, "kind": "api", "amount": 2.5}, {"id": 10, "kind": "api", "amount": 3.0}], indent=2),
        ),
        0,
        expect=json_rows("api.json"),
    ),
    # --- parquet schema drift -------------------------------------------------------------------
    Case(
        "parquet-missing-column",
        "nyc.trips",
        pq_file("narrow.parquet", pa.table({"trip_id": [1], "fare_amount": [1.0]})),
        1,
        ["narrow.parquet", "passenger_count"],
    ),
    Case(
        "parquet-extra-column",
        "nyc.trips",
        pq_file("wide.parquet", trips(5).append_column("tip", pa.array([1.0] * 5))),
        1,
        ["wide.parquet", "tip"],
    ),
    Case("parquet-retyped", "nyc.trips", retyped, 1, ["retyped.parquet", "passenger_count", "string"]),
    Case("parquet-null-typed-column", "nyc.trips", null_typed, 3, ["nulltyped.parquet", "passenger_count"]),
    # --- identifiers (found before any SQL) -------------------------------------------------------
    Case("ident-injection", "nyc.trips'; DROP TABLE nyc.trips; --", pq_file("i1.parquet"), 2, ["not allowed"]),
    Case("ident-no-namespace", "trips", pq_file("i2.parquet"), 2, ["needs a namespace"]),
    Case("ident-empty-part", "nyc..trips", pq_file("i3.parquet"), 2, ["not allowed"]),
    Case("ident-space", "nyc.tr ips", pq_file("i4.parquet"), 2, ["not allowed"]),
    Case("ident-backticks", "nyc.`trips`", pq_file("i5.parquet"), 2, ["not allowed"]),
    Case("ident-too-long", f"nyc.{LONG}", pq_file("i6.parquet"), 2, ["too long", "300"]),
    Case("branch-semicolon", "nyc.trips", pq_file("b1.parquet"), 2, ["branch name"], args=["--branch", "a;b"]),
    Case("branch-main", "nyc.trips", pq_file("b2.parquet"), 2, ["reserved"], args=["--branch", "main"]),
    Case("branch-quote", "nyc.trips", pq_file("b3.parquet"), 2, ["branch name"], args=["--branch", "a'b"]),
    Case("branch-too-long", "nyc.trips", pq_file("b4.parquet"), 2, ["too long"], args=["--branch", "b" * 200]),
    Case(
        "run-id-injection",
        "nyc.trips",
        pq_file("r1.parquet"),
        2,
        ["not allowed"],
        args=["--run-id", "x'; --"],
        recorded=False,
    ),
    # --- check declarations (rejected before anything is written) ---------------------------------
    Case(
        "check-sql-delete",
        "nyc.trips",
        pq_file("c1.parquet"),
        2,
        ["custom_sql"],
        config=bad_check('{ check = "custom_sql", sql = "DELETE FROM nyc.trips" }'),
        recorded=False,
    ),
    Case(
        "check-sql-drop",
        "nyc.trips",
        pq_file("c2.parquet"),
        2,
        ["custom_sql"],
        config=bad_check('{ check = "custom_sql", sql = "DROP TABLE nyc.trips" }'),
        recorded=False,
    ),
    Case(
        "check-sql-call",
        "nyc.trips",
        pq_file("c3.parquet"),
        2,
        ["custom_sql"],
        config=bad_check(
            f'{{ check = "custom_sql", sql = "CALL {CATALOG}.system.set_current_snapshot(\'nyc.trips\', 1)" }}'
        ),
        recorded=False,
    ),
    Case(
        "check-sql-insert",
        "nyc.trips",
        pq_file("c4.parquet"),
        2,
        ["custom_sql"],
        config=bad_check('{ check = "custom_sql", sql = "INSERT INTO nyc.trips SELECT * FROM batch" }'),
        recorded=False,
    ),
    Case(
        "check-sql-set",
        "nyc.trips",
        pq_file("c5.parquet"),
        2,
        ["custom_sql"],
        config=bad_check('{ check = "custom_sql", sql = "SET spark.sql.ansi.enabled=false" }'),
        recorded=False,
    ),
    Case(
        "check-sql-two-statements",
        "nyc.trips",
        pq_file("c6.parquet"),
        2,
        ["custom_sql"],
        config=bad_check('{ check = "custom_sql", sql = "SELECT * FROM batch WHERE 1=0; DROP TABLE nyc.trips" }'),
        recorded=False,
    ),
    Case(
        "check-sql-comment-hidden",
        "nyc.trips",
        pq_file("c7.parquet"),
        2,
        ["custom_sql"],
        config=bad_check(
            '{ check = "custom_sql", sql = "SELECT * FROM batch WHERE 1=0 /* x */ ; DELETE FROM nyc.trips" }'
        ),
        recorded=False,
    ),
    Case(
        "check-expression-reflect",
        "nyc.trips",
        pq_file("c8.parquet"),
        2,
        ["reflect"],
        config=bad_check("{ check = \"expression\", sql = \"reflect('java.lang.System', 'exit', 0) IS NULL\" }"),
        recorded=False,
    ),
    Case(
        "check-filter-fullwidth-semicolon",
        "nyc.trips",
        pq_file("c9.parquet"),
        2,
        ["filter"],
        config=bad_check(
            '{ check = "not_null", column = "trip_id", filter = "trip_id > 0\uff1b DROP TABLE nyc.trips" }'
        ),
        recorded=False,
    ),
    Case(
        "check-unknown-type",
        "nyc.trips",
        pq_file("c10.parquet"),
        2,
        ["not_nul"],
        config=bad_check('{ check = "not_nul", column = "trip_id" }'),
        recorded=False,
    ),
    Case(
        "check-unknown-column",
        "nyc.trips",
        pq_file("c11.parquet"),
        2,
        ["pasenger_count", "did you mean"],
        config=bad_check('{ check = "not_null", column = "pasenger_count" }'),
    ),
    Case(
        "check-between-without-bounds",
        "nyc.trips",
        pq_file("c12.parquet"),
        2,
        ["between"],
        config=bad_check('{ check = "between", column = "fare_amount" }'),
        recorded=False,
    ),
    Case(
        "check-non-boolean-expression",
        "nyc.trips",
        pq_file("c13.parquet"),
        2,
        ["not a boolean"],
        config=bad_check('{ check = "expression", sql = "fare_amount * 2" }'),
    ),
    # --- configuration ---------------------------------------------------------------------------
    Case("config-bad-toml", "nyc.trips", pq_file("k1.parquet"), 2, ["TOML"], config="[tables\nx = ", recorded=False),
    Case(
        "config-unknown-key",
        "nyc.trips",
        pq_file("k2.parquet"),
        2,
        ["formatt"],
        config='[tables."nyc.trips"]\nformatt = "csv"\n',
        recorded=False,
    ),
    Case(
        "config-bad-format",
        "nyc.trips",
        pq_file("k3.parquet"),
        2,
        ["format"],
        config='[tables."nyc.trips"]\nformat = "xlsx"\n',
        recorded=False,
    ),
    Case(
        "config-bad-on-failure",
        "nyc.trips",
        pq_file("k4.parquet"),
        2,
        ["on_failure"],
        config='[tables."nyc.trips"]\non_failure = "maybe"\n',
        recorded=False,
    ),
    Case(
        "config-warehouse-is-a-file",
        "nyc.trips",
        lambda d: [text_file("afile", "not a folder")(d), pq_file("k6.parquet")(d)][1],
        2,
        ["afile", "is a file"],
        config='[lakehouse]\nwarehouse = "{DIR}/afile/lake"\n',
        recorded=False,
    ),
    Case(
        "config-missing-file",
        "nyc.trips",
        pq_file("k5.parquet"),
        2,
        ["does not exist"],
        args=["--config", "/nonexistent/wap.toml"],
        recorded=False,
    ),
]


# Spark cases run through the CLI in this process (see the module docstring); every other case is a process.
# Kept as processes, one per group: a publish of an odd name given as a non-ASCII argv (name-unicode), a
# glob over Spark output, a corrupt parquet file and a CSV in the wrong encoding (errors raised in the
# JVM), a schema-contract block (JSON), and a check found wrong only once Spark reads the table.
IN_PROCESS = {
    c.id
    for c in CASES
    if (
        (c.id.startswith(("name-", "parquet-", "csv-", "json-")) and c.code in (0, 1, 3))
        or c.id == "check-non-boolean-expression"
    )
    and c.id
    not in {
        "name-unicode",
        "name-spark-output-glob",
        "parquet-truncated",
        "csv-cp1252",
        "json-extra-field",
        # Refused by wapflow's file checks before Spark starts: cheap as processes.
        "name-missing",
        "name-glob-matches-nothing",
        "name-empty-file",
        "name-success-marker-named",
        "name-symlink-loop",
        "name-dangling-symlink",
        "name-empty-folder",
    }
}


def _wap_here(*args: str) -> Proc:
    """`wap ARGS` through the CLI in this process (the session's SparkSession is reused as a `wap` process
    reuses its own): exit code, stdout and stderr as a process would give them."""
    from typer.testing import CliRunner

    from wapflow.cli.root import app

    res = CliRunner().invoke(app, list(args))
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return Proc(res.exit_code, res.stdout, res.stderr)


def _assert_no_trace(stderr: str) -> None:
    assert "Traceback" not in stderr, stderr
    assert "\tat " not in stderr and "at org.apache" not in stderr, stderr
    assert " ERROR " not in stderr and " WARN " not in stderr, stderr
    assert stderr.count("error:") <= 1, stderr


def _config_for(lake: Lake, case: Case, d: Path) -> str:
    if case.config is None:
        return str(lake.cfg)
    # Same warehouse and catalog; only the tables' sections (or broken text) differ.
    text = case.config.replace("{DIR}", str(d))
    head = "" if text.startswith("[lakehouse]") else lake.cfg.read_text().split('[tables."nyc.trips"]')[0]
    p = d / "wap.toml"
    p.write_text(head + text)
    return str(p)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_matrix(lake: Lake, case: Case, tmp_path: Path) -> None:
    i = lake.next_id()
    as_json = i % 2 == 0
    d = tmp_path / "in"
    d.mkdir()
    named = case.files(d)
    sources = sorted(p for p in d.rglob("*") if p.is_file() and not p.is_symlink())
    before_bytes = {p: p.read_bytes() for p in sources}
    table = case.table if case.table in ("nyc.trips", "raw.people", "raw.events") else "nyc.trips"
    main_before, rows_before = lake.reader.main(table), lake.reader.rows(table)
    run_id = f"m{i}"
    args = ["run", case.table, *named, *case.args]
    if "--run-id" not in case.args:
        args += ["--run-id", run_id]
    if "--config" not in case.args:
        args += ["--config", _config_for(lake, case, d)]
    if as_json:
        args.append("--json")
    if case.id in IN_PROCESS:
        p = _wap_here(*args)
    elif case.config is None and "--config" not in case.args:
        p = wap(*args, **lake.engine)  # the lakehouse's wap.toml: through its warm engine
    else:
        p = wap(*args)
    assert p.code == case.code, p.text
    _assert_no_trace(p.stderr)
    if as_json:
        doc = p.doc
        message = json.dumps(doc)
        if case.code == 0:
            assert doc["status"] == "published"
        elif case.code == 1:  # the schema contract: an audit outcome, decided before anything is written
            assert doc["status"] == "blocked" and doc["error"] is None, doc
            assert [c["check"] for c in doc["checks"] if c["status"] == "failed"] == ["schema"], doc
        else:
            assert doc["status"] == "failed" and doc["error"]["exit_code"] == case.code, doc
    else:
        message = p.stderr + p.stdout
        if case.code == 1:
            assert "blocked by schema" in p.stdout and "error:" not in p.stderr
        elif case.code != 0:
            assert "error:" in p.stderr
    for w in case.words:
        assert w in message, (w, message)
    for path, data in before_bytes.items():
        assert path.read_bytes() == data, f"{path} changed"
    if case.code == 0:
        assert case.expect is not None
        added = case.expect(d)
        got = lake.reader.rows(table)
        assert len(got) == len(rows_before) + len(added)
        key = "trip_id" if table == "nyc.trips" else "id"
        assert sorted(r[key] for r in got) == sorted([r[key] for r in rows_before] + [r[key] for r in added])
        summary = lake.reader.summaries(table)[-1]
        assert summary.get("wapflow.run-id") == run_id
    else:
        assert lake.reader.main(table) == main_before
        assert len(lake.reader.rows(table)) == len(rows_before)
        assert lake.reader.branches(table) == []
        if case.recorded and "--run-id" not in case.args:
            assert lake.run_status(run_id) == ("blocked" if case.code == 1 else "failed")


def test_run_id_with_other_files_is_refused(lake: Lake, tmp_path: Path, spark: Any) -> None:
    first = write_parquet(tmp_path / "first.parquet", trips(5))
    other = write_parquet(tmp_path / "other.parquet", trips(5))
    done = setup_run(spark, lake.cfg, "nyc.trips", first, run_id="same_id")  # the scene, in this process
    assert done.status == "published", done.message
    main = lake.reader.main("nyc.trips")
    p = wap("run", "nyc.trips", str(other), "--run-id", "same_id", "--config", str(lake.cfg), **lake.engine)
    assert p.code == 2, p.text
    assert "first.parquet" in p.stderr and "other.parquet" in p.stderr and "one set of files" in p.stderr
    _assert_no_trace(p.stderr)
    assert lake.reader.main("nyc.trips") == main
    p = wap("run", "nyc.trips", str(first), "--run-id", "same_id", "--config", str(lake.cfg), "--json", **lake.engine)
    assert p.code == 0 and "already published" in p.doc["message"]
    assert lake.reader.main("nyc.trips") == main


def _parallel(lake: Lake, table: str, files: list[Path]) -> list[tuple[int, dict[str, Any]]]:
    procs = [
        subprocess.Popen([WAP, "run", table, str(f), "--config", str(lake.cfg), "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
        for f in files
    ]  # fmt: skip
    out = []
    for p in procs:
        so, se = p.communicate(timeout=600)
        _assert_no_trace(se)
        out.append((p.returncode, json.loads(so)))
    return out


def test_three_concurrent_processes_all_publish(lake: Lake, tmp_path: Path) -> None:
    files = [write_parquet(tmp_path / f"par{i}.parquet", trips(30)) for i in range(3)]
    before = lake.reader.rows("nyc.trips")
    results = _parallel(lake, "nyc.trips", files)
    assert [c for c, _ in results] == [0, 0, 0], results
    got = lake.reader.rows("nyc.trips")
    expected = [r["trip_id"] for r in before] + [r["trip_id"] for f in files for r in pq.read_table(f).to_pylist()]
    assert sorted(r["trip_id"] for r in got) == sorted(expected)
    assert lake.reader.branches("nyc.trips") == []
    # Whichever published after another re-applied its snapshot on top (or found main unmoved): metadata only.
    assert {doc["status"] for _, doc in results} == {"published"}
    assert {doc["published_via"] for _, doc in results} <= {"fast_forward", "cherry_pick"}


def test_three_concurrent_processes_with_colliding_keys_one_lands(lake: Lake, tmp_path: Path) -> None:
    """unique_in_table: three batches with the same new keys; whatever the timing, one lands, two are blocked."""
    same = generate_trips(20, start_id=50_000)
    files = [write_parquet(tmp_path / f"dup{i}.parquet", same) for i in range(3)]
    before = len(lake.reader.rows("nyc.uniq"))
    results = _parallel(lake, "nyc.uniq", files)
    codes = sorted(c for c, _ in results)
    assert codes == [0, 1, 1], results
    assert len(lake.reader.rows("nyc.uniq")) == before + 20
    for c, doc in results:
        if c == 1:
            failed = [ch for ch in doc["checks"] if ch["status"] == "failed"]
            assert [ch["check"] for ch in failed] == ["unique_in_table"]
            assert failed[0]["failing_rows"] == 20
