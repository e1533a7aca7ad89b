"""What you name is what is read, and strict means strict for every format.

Names Spark would glob, hide or misread are read as exactly those files (through links with safe
names); folders read their data files and report the bookkeeping files they skip; CSV and JSON get
the same schema contract as parquet; malformed text is refused before anything is written, naming
the file (and line). After every publish the rows on main (read with PyIceberg) equal the rows of
the files (read with pyarrow / csv / json); after every refusal main, the files and the table list
are unchanged.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from support.data import write_parquet
from support.landing_files import pq_write, s3_put, s3_storage, simple
from wapflow.errors import InputError, MissingInput, SchemaMismatch
from wapflow.files.resolve import resolve_files
from wapflow.files.spark_paths import SparkInputs
from wapflow.pipeline import run_wap
from wapflow.sql.identifiers import TableName
from wapflow.writing.input_errors import input_error_from_spark
from wapflow.writing.read import detect_format, read_batch


def pq_rows(*paths: Path) -> list[dict[str, Any]]:
    return sorted((r for p in paths for r in pq.read_table(p).to_pylist()), key=lambda r: r["id"])


def csv_rows(
    *paths: Path, sep: str = ",", encoding: str = "utf-8-sig", types: dict[str, Callable[[str], Any]] | None = None
) -> list[dict[str, Any]]:
    types = types or {"id": int, "amount": float}
    out = []
    for p in paths:
        with open(p, newline="", encoding=encoding) as f:
            for r in csv.DictReader(f, delimiter=sep):
                out.append({k: (types[k](v) if k in types and v != "" else v) for k, v in r.items()})
    return sorted(out, key=lambda r: r["id"])


def json_rows(*paths: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in paths:
        text = p.read_text(encoding="utf-8-sig")
        out += (
            json.loads(text)
            if text.lstrip().startswith("[")
            else [json.loads(x) for x in text.splitlines() if x.strip()]
        )
    return sorted(out, key=lambda r: r["id"])


def main_rows(lh: Any, table: str) -> list[dict[str, Any]]:
    """main, read without Spark (PyIceberg on the SQLite catalog)."""
    from pyiceberg.catalog.sql import SqlCatalog

    wh = Path(lh.config.warehouse_location())
    cat = SqlCatalog(lh.catalog, uri=f"sqlite:///{wh / 'catalog.db'}", warehouse=f"file://{wh}")
    return sorted(cat.load_table(table).scan().to_arrow().to_pylist(), key=lambda r: r["id"])


def main_columns(lh: Any, table: str) -> list[str]:
    from pyiceberg.catalog.sql import SqlCatalog

    wh = Path(lh.config.warehouse_location())
    cat = SqlCatalog(lh.catalog, uri=f"sqlite:///{wh / 'catalog.db'}", warehouse=f"file://{wh}")
    return [f.name for f in cat.load_table(table).schema().fields]


def pick(rows: list[dict[str, Any]], cols: list[str]) -> list[dict[str, Any]]:
    return [{c: r.get(c) for c in cols} for r in rows]


# These tests are about reading files, not about checks: their tables publish without (--no-checks).


def published(lh: Any, table: str, names: list[str]) -> Any:
    res = run_wap(lh, table, names, no_checks=True)
    assert res.status == "published", res.message
    assert res.exit_code == 0
    return res


def refused(
    lh: Any, table: str, names: list[str], words: list[str], files: list[Path], *, kind: type = InputError
) -> Any:
    """A refused run: failed, exit 3 (2 for a name that names nothing; for a schema contract violation, blocked,
    exit 1), the file and the words in the message, main and the files unchanged."""
    t = TableName.parse(table)
    existed = lh.tables.exists(t)
    before = lh.tables.head(t) if existed else None
    rows_before = main_rows(lh, table) if existed else None
    content = {p: p.read_bytes() for p in files}
    res = run_wap(lh, table, names, no_checks=True)
    if kind is SchemaMismatch:
        # A schema contract violation is an audit outcome: blocked by a failed `schema` check, nothing written.
        assert res.status == "blocked" and res.exit_code == 1, res.message
        assert res.error is None and res.rows_written == 0
        assert [c["check"] for c in res.checks if c["status"] == "failed"] == ["schema"], res.checks
    else:
        assert res.status == "failed", res.message
        assert res.exit_code == kind.exit_code, res.message
        assert res.error["type"] == kind.__name__, res.error
    for w in words:
        assert w in res.message, (w, res.message)
    assert lh.tables.exists(t) == existed  # a refused first run creates no table
    if existed:
        assert lh.tables.head(t) == before
        assert main_rows(lh, table) == rows_before
        assert [b.name for b in lh.iceberg.list(t)] == []
    for p, b in content.items():
        assert p.read_bytes() == b  # the file is left as it was
    return res


@pytest.fixture
def lh(lakehouse_factory: Callable[..., Any]) -> Any:
    return lakehouse_factory({})


# --- Spark, unit level: read_batch over odd names and bad text ------------------------------------

ODD_NAMES = [
    "batch[1].parquet",
    "b{1,2}.parquet",
    "star*.parquet",
    "q?.parquet",
    "with space.parquet",
    "pct%20x.parquet",
    "hash#1.parquet",
    "export_2026-01-01T10:00:00.parquet",
    "café_données_東京.parquet",
    "_late.parquet",
    ".early.parquet",
    "x.parquet._COPYING_",
    "dt=2026-01-01/part-0.parquet",
    "back\\slash.parquet",
]


@pytest.mark.spark
@pytest.mark.parametrize("name", ODD_NAMES)
def test_read_batch_reads_exactly_the_named_file(spark, landing, name):
    f = pq_write(landing / name)
    pq_write(landing / "batch1.parquet")  # a lookalike a glob would pick instead
    srcs = resolve_files([str(f)])
    with SparkInputs(srcs) as inputs:
        df = read_batch(spark, srcs, "parquet", {}, inputs=inputs)
        assert df.columns == ["id", "name", "amount"]  # no partition column forged from dt=...
        assert sorted((r.asDict() for r in df.collect()), key=lambda r: r["id"]) == pq_rows(f)


@pytest.mark.spark
def test_spark_hides_named_underscore_files_without_links(spark, landing):
    """The defect, measured: with globbing off, Spark still drops an explicitly named _x.parquet."""
    f = pq_write(landing / "_x.parquet")
    with pytest.raises(Exception) as e:
        spark.read.option("__globPaths__", "false").parquet(str(f)).collect()
    assert "UNABLE_TO_INFER_SCHEMA" in str(e.value)
    err = input_error_from_spark(e.value, resolve_files([str(f)]), fmt="parquet")
    assert err is not None and "_x.parquet" in err.message


@pytest.mark.spark
def test_csv_columns_are_the_header_typed_like_the_table(spark, landing):
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    table = StructType(
        [StructField("id", LongType()), StructField("amount", DoubleType()), StructField("name", StringType())]
    )
    f = landing / "wide.csv"
    f.write_text("ID,amount,coupon\n1,2.5,x1\n2,3.5,x2\n")
    srcs = resolve_files([str(f)])
    df = read_batch(spark, srcs, "csv", {}, table)
    assert [(c.name, c.dataType.simpleString()) for c in df.schema] == [
        ("ID", "bigint"),
        ("amount", "double"),
        ("coupon", "string"),
    ]
    assert [tuple(r) for r in df.orderBy("ID").collect()] == [(1, 2.5, "x1"), (2, 3.5, "x2")]


@pytest.mark.spark
def test_json_columns_are_the_keys_of_all_records(spark, landing):
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    table = StructType(
        [StructField("id", LongType()), StructField("kind", StringType()), StructField("amount", DoubleType())]
    )
    f = landing / "e.jsonl"
    f.write_text('{"id": 1, "kind": "a"}\n{"id": 2, "kind": "b", "extra": true}\n')
    df = read_batch(spark, resolve_files([str(f)]), "json", {}, table)
    assert sorted(df.columns) == ["extra", "id", "kind"]  # 'amount' is in no record: missing, for the contract
    assert [r.asDict() for r in df.orderBy("id").collect()] == [
        {"extra": None, "id": 1, "kind": "a"},  # a key absent from some records is NULL there
        {"extra": True, "id": 2, "kind": "b"},
    ]


@pytest.mark.spark
@pytest.mark.parametrize(
    "name,content,options,words",
    [
        ("semi.csv", "id;fare;tip;name\n1;2.5;0.5;x\n", {}, ["semi.csv", "';'-delimited", 'sep = ";"']),
        ("tabs.csv", "id\tname\n1\tx\n", {}, ["tabs.csv", 'sep = "\\t"']),
        ("pipes.csv", "id|name\n1|x\n", {}, ["pipes.csv", 'sep = "|"']),
        ("excel.csv", "\ufeffid;score;name\r\n3;1,5;cy\r\n", {}, ["excel.csv", 'sep = ";"']),
        ("dup.csv", "id,score,Score\n1,2,3\n", {}, ["dup.csv", "'Score' twice"]),
        ("noname.csv", "id,,name\n1,2,x\n", {}, ["noname.csv", "no name for column 2"]),
        ("spaced.csv", "id, name\n1,x\n", {}, ["spaced.csv", "' name'", "ignoreLeadingWhiteSpace"]),
        ("noheader.csv", "1,2.5,2026-01-01\n2,3.5,2026-01-02\n", {}, ["noheader.csv", "looks like data, not a header"]),
        (
            "long.csv",
            "id,score,name\n5,1.0,eve\n6,2.0,fay,extra\n",
            {},
            ["line 3 of", "long.csv", "4 value(s)", "3 columns"],
        ),
        ("short.csv", "id,score,name\n7,1.0,gus\n8,2.0\n", {}, ["line 3 of", "short.csv", "2 value(s)"]),
        (
            "newline.csv",
            'id,name\n1,"ann\nsmith"\n2,bob\n',
            {},
            ["newline.csv", "spanning several lines", "line 2", 'multiLine = "true"'],
        ),
        ("onecol.csv", 'name\n"ann\nsmith"\nbob\n', {}, ["onecol.csv", "line 2", "multiLine"]),
        ("binary.csv", bytes(range(256)) * 4, {}, ["binary.csv", "not a text file"]),
        (
            "cp.csv",
            "id,name\n9,Jos\xe9\n".encode("cp1252"),
            {},
            ["cp.csv", "not valid UTF-8", "line 2", 'encoding = "windows-1252"'],
        ),
        ("utf16.csv", "id,name\n1,x\n".encode("utf-16"), {}, ["utf16.csv", "UTF-16"]),
        ("blank.csv", "\n\n", {}, ["blank.csv", "no header"]),
        ("notjson.json", "id,kind,amount\n6,x,1.0\n", {}, ["notjson.json", "is not JSON", 'format = "csv"']),
        ("pretty.json", '{\n  "id": 1\n}\n', {}, ["pretty.json", "not a complete JSON object", 'multiLine = "true"']),
        ("cut.json", '{"id": 7}\n{"id": 8, "ki', {}, ["line 2 of", "cut.json", "not valid JSON"]),
        ("scalar.jsonl", '{"id": 7}\n42\n', {}, ["line 2 of", "scalar.jsonl", "a number, not a JSON object"]),
        ("binary.json", b"\x89PNG\r\n\x1a\n\x00\x00", {}, ["binary.json", "not a text file"]),
        ("blank.json", "  \n\n", {}, ["blank.json", "no JSON records"]),
        (
            "twovalues.json",
            '{"id": 1}\n{"id": 2}\n',
            {"multiLine": "true"},
            ["twovalues.json", "more than one JSON value"],
        ),
        ("arr.json", '[{"id": 1}, 2]', {}, ["arr.json", "element 2", "not an object"]),
    ],
)
def test_bad_text_is_refused_before_spark_reads_it(spark, landing, name, content, options, words):
    f = landing / name
    f.write_bytes(content if isinstance(content, bytes) else content.encode())
    before = f.read_bytes()
    srcs = resolve_files([str(f)])
    with pytest.raises(InputError) as e:
        read_batch(spark, srcs, detect_format(srcs, None), options)
    for w in words:
        assert w in str(e.value), (w, str(e.value))
    assert f.read_bytes() == before


@pytest.mark.spark
def test_a_quoted_newline_beyond_the_checked_head_is_found_by_the_scan(spark, landing):
    f = landing / "big.csv"
    f.write_text("id,note\n" + "".join(f'{i},"n {i}, ok"\n' for i in range(12_000)) + '99999,"a\nb"\n')
    assert f.stat().st_size > 64 * 1024
    with pytest.raises(InputError, match=r"starting at line 12002"):
        read_batch(spark, resolve_files([str(f)]), "csv", {})
    df = read_batch(spark, resolve_files([str(f)]), "csv", {"multiLine": "true"})
    assert df.count() == 12_001 and df.where("id = 99999").first()["note"] == "a\nb"


@pytest.mark.spark
def test_spark_failures_beyond_the_head_name_the_real_file_and_line(spark, landing):
    """Spark's FAILFAST error names a link; input_error_from_spark names the file the user gave, and the line."""
    f = landing / "_ragged[1].csv"
    f.write_text("id,name\n" + "".join(f"{i},n{i}\n" for i in range(10_000)) + "10000,x,extra\n")
    srcs = resolve_files([str(f)])
    with SparkInputs(srcs) as inputs:
        df = read_batch(spark, srcs, "csv", {}, inputs=inputs)
        with pytest.raises(Exception) as e:
            df.collect()
        assert "wapflow-read-" in str(e.value)  # Spark only knows the link
    err = input_error_from_spark(e.value, srcs, fmt="csv")
    assert err is not None and str(f) in err.message and "line 10002" in err.message and "10000,x,extra" in err.message
    assert "wapflow-read-" not in err.message


@pytest.mark.spark
def test_values_that_do_not_fit_the_table_name_file_column_and_line(spark, landing):
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    table = StructType(
        [StructField("id", LongType()), StructField("score", DoubleType()), StructField("name", StringType())]
    )
    c = landing / "typed.csv"
    c.write_text("id,score,name\n1,2.5,a\n2,high,b\n")
    srcs = resolve_files([str(c)])
    with pytest.raises(Exception) as e:
        read_batch(spark, srcs, "csv", {}, table).collect()
    err = input_error_from_spark(e.value, srcs, fmt="csv")
    assert err is not None and all(w in err.message for w in [str(c), "'high'", "column 'score'", "line 3", '"high"'])
    j = landing / "typed.jsonl"
    j.write_text('{"id": 1, "score": 1.0}\n{"id": "five", "score": 2.0}\n')
    srcs = resolve_files([str(j)])
    with pytest.raises(Exception) as e:
        read_batch(spark, srcs, "json", {}, table).collect()
    err = input_error_from_spark(e.value, srcs, fmt="json")
    assert err is not None and all(w in err.message for w in [str(j), "'five'", "column 'id'", "line 2", "bigint"])


@pytest.mark.spark
def test_failures_that_are_not_about_the_input_are_not_input_errors(spark, landing):
    srcs = resolve_files([str(pq_write(landing / "a.parquet"))])
    with pytest.raises(Exception) as e:
        spark.sql("SELECT * FROM no_such_catalog_x.db.t").collect()
    assert input_error_from_spark(e.value, srcs, fmt="parquet") is None
    assert input_error_from_spark(RuntimeError("AccessDenied on s3://lake/warehouse"), srcs) is None
    other = landing / "elsewhere.parquet"  # a file Spark failed to read that is not a source of the run
    other.write_bytes(b"PAR1 not really PAR1")
    with pytest.raises(Exception) as e:
        spark.read.parquet(str(other)).collect()
    assert input_error_from_spark(e.value, srcs, fmt="parquet") is None


@pytest.mark.spark
def test_parquet_files_of_one_batch_must_share_their_columns(spark, landing):
    a = pq_write(landing / "a.parquet")
    b = pq_write(landing / "b.parquet", simple().drop(["amount"]))
    with pytest.raises(InputError, match=r"b.parquet does not have the same columns as .*a.parquet: it lacks 'amount'"):
        read_batch(spark, resolve_files([str(a), str(b)]), "parquet", {})


@pytest.mark.spark
def test_a_parquet_batch_of_a_known_footer_reads_with_the_schema_spark_inferred(spark, landing):
    """The schema Spark inferred for one batch is given to the next of the same footer schema (no inference
    job), never to a batch whose footer differs only in types, nor to one of the same schema read otherwise."""
    import wapflow.writing.read as read_module

    def read(f: Path, options: dict[str, str] | None = None) -> Any:
        srcs = resolve_files([str(f)])
        with SparkInputs(srcs) as inputs:
            df = read_batch(spark, srcs, "parquet", options or {}, inputs=inputs)
            return df.schema, sorted((r.asDict() for r in df.collect()), key=lambda r: r["id"])

    first = pq_write(landing / "first.parquet")
    second = pq_write(landing / "second.parquet")
    schema, _ = read(first)
    known = read_module._INFERRED[spark]
    assert schema in known.values()
    count = len(known)
    again, rows = read(second)
    assert again == schema and rows == pq_rows(second)
    assert len(known) == count  # the second batch was read with the first one's schema
    # The same column names with other types: its own inference, its own types.
    as_text = simple().set_column(0, "id", pa.array(["1", "2", "3", "4", "5"]))
    text_schema, text_rows = read(write_parquet(landing / "text.parquet", as_text))
    assert text_schema["id"].dataType.simpleString() == "string"
    assert [r["id"] for r in text_rows] == ["1", "2", "3", "4", "5"]
    assert len(known) == count + 1
    # INT96 timestamps and INT64 ones have the same arrow schema, not the same footer: each gets Spark's own.
    stamps = pa.table({"id": [1], "at": pa.array([1_700_000_000_000_000], pa.timestamp("us"))})
    int64 = write_parquet(landing / "int64.parquet", stamps)
    int96 = landing / "int96.parquet"
    pq.write_table(stamps, int96, use_deprecated_int96_timestamps=True)
    for f in (int64, int96):
        assert read(f)[0]["at"].dataType == spark.read.parquet(str(f)).schema["at"].dataType
    assert len(known) == count + 3


@pytest.mark.spark
def test_a_parquet_column_without_a_type_is_refused(lh, landing):
    """Spark reads parquet's null type as int: a guess the contract would then accept."""
    published(lh, "raw.items", [str(pq_write(landing / "ok.parquet"))])
    t = simple()
    t = t.set_column(t.schema.get_field_index("amount"), "amount", pa.nulls(len(t), pa.null()))
    f = pq_write(landing / "nulltyped.parquet", t)
    refused(lh, "raw.items", [str(f)], [str(f), "column 'amount'", "has no type"], [f])
    nested = pq_write(landing / "nested.parquet", pa.table({"id": [1], "user": [{"name": "a", "x": None}]}))
    with pytest.raises(InputError, match=r"column 'user.x' of .*nested.parquet has no type"):
        read_batch(lh.spark, resolve_files([str(nested)]), "parquet", {})


@pytest.mark.spark
def test_csv_files_of_one_batch_must_share_their_header(spark, landing):
    (landing / "a.csv").write_text("id,name\n1,x\n")
    (landing / "b.csv").write_text("id,nam\n2,y\n")
    with pytest.raises(
        InputError, match=r"the header of .*b.csv differs from that of .*a.csv: it lacks 'name'; has 'nam'"
    ):
        read_batch(spark, resolve_files([str(landing / "*.csv")]), "csv", {})


@pytest.mark.spark
def test_json_arrays_and_lines_are_not_mixed(spark, landing):
    (landing / "a.json").write_text('[{"id": 1}]')
    (landing / "b.json").write_text('{"id": 2}\n')
    with pytest.raises(InputError, match=r"mixes JSON arrays .*a\.json.* and JSON lines .*b\.json"):
        read_batch(spark, resolve_files([str(landing / "*.json")]), "json", {})


# --- end to end: odd names publish exactly their rows ---------------------------------------------


@pytest.mark.spark
def test_bracket_name_beside_its_lookalike_publishes_only_itself(lh, landing):
    bracket, lookalike = pq_write(landing / "batch[1].parquet"), pq_write(landing / "batch1.parquet")
    res = published(lh, "raw.items", [str(bracket)])
    assert res.files == [str(bracket)]
    assert main_rows(lh, "raw.items") == pq_rows(bracket)
    assert lookalike.exists()


@pytest.mark.spark
def test_one_run_over_many_odd_names_publishes_every_row_of_every_file(lh, landing):
    files = [pq_write(landing / n) for n in ODD_NAMES]
    res = published(lh, "raw.items", [str(f) for f in files])
    assert res.rows_written == 5 * len(files)
    assert main_rows(lh, "raw.items") == pq_rows(*files)
    assert main_columns(lh, "raw.items") == ["id", "name", "amount"]  # no 'dt' from dt=2026-01-01/


@pytest.mark.spark
def test_a_glob_over_a_and_underscore_b_publishes_both(lh, landing):
    a, b = pq_write(landing / "g" / "a.parquet"), pq_write(landing / "g" / "_b.parquet")
    published(lh, "raw.items", [str(landing / "g" / "*.parquet")])
    assert main_rows(lh, "raw.items") == pq_rows(a, b)


@pytest.mark.spark
def test_underscore_csv_into_an_existing_table_publishes_its_rows(lh, landing):
    first, late = landing / "first.csv", landing / "_late.csv"
    first.write_text("id,name,amount\n1,a,1.5\n")
    late.write_text("id,name,amount\n2,b,2.5\n3,c,3.5\n")
    published(lh, "raw.people", [str(first)])
    res = published(lh, "raw.people", [str(late)])
    assert res.rows_written == 2
    assert main_rows(lh, "raw.people") == csv_rows(first, late)


@pytest.mark.spark
def test_colon_and_unicode_csv_names_publish(lh, landing):
    a, b = landing / "export_2026-01-01T10:00:00.csv", landing / "données ü.csv"
    a.write_text("id,name,amount\n1,a,1.5\n")
    b.write_text("id,name,amount\n2,ü,2.5\n")
    published(lh, "raw.people", [str(a), str(b)])
    assert main_rows(lh, "raw.people") == csv_rows(a, b)


@pytest.mark.spark
def test_spark_output_folder_and_glob_publish_the_part_files(lh, landing):
    out = landing / "out"
    parts = [pq_write(out / "part-00000-abc.snappy.parquet"), pq_write(out / "part-00001-abc.snappy.parquet")]
    (out / "_SUCCESS").write_bytes(b"")
    (out / ".part-00000-abc.snappy.parquet.crc").write_bytes(b"crc\x00")  # a stale checksum is not used
    res = published(lh, "raw.items", [str(out)])
    assert res.files == [str(p) for p in parts]
    assert main_rows(lh, "raw.items") == pq_rows(*parts)
    more = [pq_write(landing / "out2" / "part-00000.parquet")]
    (landing / "out2" / "_SUCCESS").write_bytes(b"")
    published(lh, "raw.items", [str(landing / "out2" / "*")])
    assert main_rows(lh, "raw.items") == pq_rows(*parts, *more)


@pytest.mark.spark
def test_named_success_marker_and_empty_matches_are_refused(lh, landing):
    marker = landing / "_SUCCESS"
    marker.write_bytes(b"")
    refused(lh, "raw.items", [str(marker)], [str(marker), "not a data file"], [marker])
    refused(lh, "raw.items", [str(landing / "nothing" / "*.parquet")], ["no file matches"], [], kind=MissingInput)


# --- end to end: CSV ------------------------------------------------------------------------------


@pytest.mark.spark
def test_semicolon_csv_is_refused_instead_of_one_column_table(lakehouse_factory, landing):
    f = landing / "semi.csv"
    f.write_text("id;fare;tip;name\n1;2.5;0.5;x\n")
    refused(lakehouse_factory({}), "raw.fares", [str(f)], [str(f), 'sep = ";"'], [f])
    lh2 = lakehouse_factory({"raw.fares": {"read_options": {"sep": ";"}}})
    published(lh2, "raw.fares", [str(f)])
    assert main_rows(lh2, "raw.fares") == [{"id": 1, "fare": 2.5, "tip": 0.5, "name": "x"}]


@pytest.mark.spark
def test_excel_bom_csv_gets_a_clean_first_column_name(lh, landing):
    f = landing / "bom.csv"
    f.write_bytes("\ufeffid,name,amount\r\n4,dee,1.5\r\n".encode())
    published(lh, "raw.people", [str(f)])
    assert main_columns(lh, "raw.people") == ["id", "name", "amount"]
    assert main_rows(lh, "raw.people") == csv_rows(f)


@pytest.mark.spark
@pytest.mark.parametrize(
    "content,words",
    [
        ("id,name,amount\n5,eve,1.0\n6,fay,2.0,extra\n", ["line 3", "4 value(s)"]),
        ("id,name,amount\n7,gus,1.0\n8,hal\n", ["line 3", "2 value(s)"]),
        ('id,name,amount\n9,"ann\nsmith",1.0\n', ["line 2", "multiLine"]),
        (bytes(range(256)) * 4, ["not a text file"]),
        ("id,name,amount\n9,Jos\xe9,1.0\n".encode("cp1252"), ['encoding = "windows-1252"']),
    ],
    ids=["ragged-long", "ragged-short", "quoted-newline", "binary", "cp1252"],
)
def test_bad_csv_into_an_existing_table_is_refused(lh, landing, content, words):
    ok = landing / "ok.csv"
    ok.write_text("id,name,amount\n1,a,1.5\n")
    published(lh, "raw.people", [str(ok)])
    bad = landing / "bad.csv"
    bad.write_bytes(content if isinstance(content, bytes) else content.encode())
    refused(lh, "raw.people", [str(bad)], [str(bad), *words], [bad])


@pytest.mark.spark
def test_cp1252_and_multiline_csv_publish_when_configured(lakehouse_factory, landing):
    lh = lakehouse_factory({"raw.people": {"read_options": {"encoding": "windows-1252", "multiLine": "true"}}})
    f = landing / "excel.csv"
    f.write_bytes('id,name,amount\r\n1,"José\nCafé €",1.5\r\n2,Zoë,2.5\r\n'.encode("cp1252"))
    published(lh, "raw.people", [str(f)])
    assert main_rows(lh, "raw.people") == csv_rows(f, encoding="cp1252")
    assert main_rows(lh, "raw.people")[0]["name"] == "José\nCafé €"  # (Spark turns \r\n inside quotes into \n)


@pytest.mark.spark
def test_a_value_that_does_not_fit_fails_naming_the_file(lh, landing):
    ok = landing / "ok.csv"
    ok.write_text("id,name,amount\n1,a,1.5\n")
    published(lh, "raw.people", [str(ok)])
    bad = landing / "typed.csv"
    bad.write_text("id,name,amount\n2,b,high\n")
    refused(lh, "raw.people", [str(bad)], [str(bad), '"high"'], [bad])


@pytest.mark.spark
def test_a_value_that_does_not_fit_names_column_and_line(lh, landing):
    ok = landing / "ok.csv"
    ok.write_text("id,name,amount\n1,a,1.5\n")
    published(lh, "raw.people", [str(ok)])
    bad = landing / "_typed[1].csv"
    bad.write_text("id,name,amount\n2,b,2.5\n3,c,high\n")
    res = refused(lh, "raw.people", [str(bad)], [str(bad), "column 'amount'", "line 3"], [bad])
    assert "wapflow-read-" not in res.message


@pytest.mark.spark
@pytest.mark.parametrize(
    "policy,header,row,outcome",
    [
        ("strict", "id,name,amount,age", "2,b,2.5,40", "+ extra column 'age'"),
        ("add_columns", "id,name,amount,age", "2,b,2.5,40", "published"),
        ("ignore_extra", "id,name,amount,age", "2,b,2.5,40", "published"),
        ("strict", "id,amount", "2,2.5", "- missing column 'name'"),
        ("add_columns", "id,amount", "2,2.5", "- missing column 'name'"),
    ],
)
def test_csv_schema_contract(lakehouse_factory, landing, policy, header, row, outcome):
    lh = lakehouse_factory({"raw.people": {"schema": policy}})
    ok = landing / "ok.csv"
    ok.write_text("id,name,amount\n1,a,1.5\n")
    published(lh, "raw.people", [str(ok)])
    f = landing / "next.csv"
    f.write_text(f"{header}\n{row}\n")
    if outcome != "published":
        refused(lh, "raw.people", [str(f)], [outcome, "next.csv"], [f], kind=SchemaMismatch)
        return
    published(lh, "raw.people", [str(f)])
    cols = main_columns(lh, "raw.people")
    assert cols == (["id", "name", "amount", "age"] if policy == "add_columns" else ["id", "name", "amount"])
    types = {"id": int, "amount": float, "age": int}
    assert main_rows(lh, "raw.people") == pick(csv_rows(ok, f, types=types), cols)


@pytest.mark.spark
def test_header_only_csv_adds_no_rows_to_an_existing_table(lh, landing):
    ok = landing / "ok.csv"
    ok.write_text("id,name,amount\n1,a,1.5\n")
    published(lh, "raw.people", [str(ok)])
    empty = landing / "empty.csv"
    empty.write_text("id,name,amount\n")
    res = run_wap(lh, "raw.people", [str(empty)], no_checks=True)
    assert res.status == "published", res.message
    assert main_rows(lh, "raw.people") == csv_rows(ok)
    new = landing / "new.csv"
    new.write_text("id,name\n")
    refused(lh, "raw.fresh", [str(new)], [str(new), "a header but no rows"], [new])


# --- end to end: JSON -----------------------------------------------------------------------------

EVENTS = '{"id": 1, "kind": "click", "amount": 1.5}\n{"id": 2, "kind": "view", "amount": 0.0}\n'


@pytest.fixture
def events(lakehouse_factory: Callable[..., Any], landing: Path) -> Any:
    lh = lakehouse_factory({})
    seed = landing / "seed.jsonl"
    seed.write_text(EVENTS)
    published(lh, "raw.events", [str(seed)])
    return lh


@pytest.mark.spark
@pytest.mark.parametrize(
    "content,words,kind",
    [
        ('{"id": 3, "kind": "x", "amount": 1.0, "secret": 1}\n', ["+ extra column 'secret'"], SchemaMismatch),
        ('{"id": 4, "kind": "x"}\n{"id": 5, "kind": "y"}\n', ["- missing column 'amount'"], SchemaMismatch),
        (
            '{"id": 6, "kind": "x", "amount": 1.0}\n{"id": 7, "kind": "y", "amount": 1.0, "extra": {"a": 1}}\n',
            ["+ extra column 'extra'"],
            SchemaMismatch,
        ),
        ('{"id": "five", "kind": "x", "amount": 1.0}\n', ["five"], InputError),
        ('{"id": 8, "kind": "x", "amount": "lots"}\n', ["lots"], InputError),
        ("id,kind,amount\n6,x,1.0\n", ["is not JSON"], InputError),
        ('{"id": 9, "kind": "x", "amount": 1.0}\n{"id": 10, "ki', ["line 2", "not valid JSON"], InputError),
    ],
    ids=["extra", "missing", "extra-in-one-record", "mistyped-id", "mistyped-amount", "csv-named-json", "truncated"],
)
def test_json_lines_under_strict(events, landing, content, words, kind):
    f = landing / "next.jsonl"
    f.write_text(content)
    refused(events, "raw.events", [str(f)], [str(f), *words], [f], kind=kind)


@pytest.mark.spark
def test_json_key_missing_from_some_records_is_null_there(events, landing):
    f = landing / "sparse.jsonl"
    f.write_text(
        '{"id": 3, "kind": "x", "amount": 2.0}\n{"id": 4, "amount": 3.0}\n{"amount": 4.0, "id": 5, "kind": null}\n'
    )
    published(events, "raw.events", [str(f)])
    expected = [
        {"id": r["id"], "kind": r.get("kind"), "amount": r["amount"]} for r in json_rows(landing / "seed.jsonl", f)
    ]
    assert main_rows(events, "raw.events") == expected


@pytest.mark.spark
def test_json_array_export_is_read_whole(events, landing):
    f = landing / "api.json"
    f.write_text(
        json.dumps([{"id": 11, "kind": "api", "amount": 2.5}, {"id": 12, "kind": "api", "amount": 3.0}], indent=2)
    )
    published(events, "raw.events", [str(f)])
    assert main_rows(events, "raw.events") == json_rows(landing / "seed.jsonl", f)


@pytest.mark.spark
def test_json_from_an_api_with_nested_objects(lh, landing):
    first = landing / "users.json"
    records = [
        {"id": 1, "user": {"name": "a", "tags": ["x", "y"]}, "score": 1.5},
        {"id": 2, "user": {"name": "b", "tags": []}, "score": None},
    ]
    first.write_text(json.dumps(records))
    published(lh, "raw.users", [str(first)])
    rows = main_rows(lh, "raw.users")
    assert rows == [
        {"id": 1, "score": 1.5, "user": {"name": "a", "tags": ["x", "y"]}},
        {"id": 2, "score": None, "user": {"name": "b", "tags": []}},
    ]
    nested_extra = landing / "users2.json"
    nested_extra.write_text(json.dumps([{"id": 3, "user": {"name": "c", "tags": [], "email": "c@x"}, "score": 2.0}]))
    refused(lh, "raw.users", [str(nested_extra)], ["'user.email'", "users2.json"], [nested_extra], kind=SchemaMismatch)
    object_for_scalar = landing / "users3.json"
    object_for_scalar.write_text(json.dumps([{"id": 4, "user": {"name": "d", "tags": []}, "score": {"value": 2}}]))
    refused(
        lh,
        "raw.users",
        [str(object_for_scalar)],
        ["'score'", "struct<value:bigint>"],
        [object_for_scalar],
        kind=SchemaMismatch,
    )


# --- integration: what the pipeline must do with the new API ------------------------------------


@pytest.mark.spark
def test_no_links_are_left_after_a_run(lh, landing):
    import tempfile

    before = {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("wapflow-read-")}
    published(lh, "raw.items", [str(pq_write(landing / "_x.parquet"))])
    after = {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("wapflow-read-")}
    assert after <= before


@pytest.mark.spark
def test_skipped_bookkeeping_files_are_reported_by_the_run(lh, landing):
    out = landing / "out"
    pq_write(out / "part-0.parquet")
    (out / "_SUCCESS").write_bytes(b"")
    res = published(lh, "raw.items", [str(out)])
    assert "skipped 1 bookkeeping file: _SUCCESS" in json.dumps(res.to_dict())


@pytest.mark.spark
def test_write_time_parse_error_names_the_real_file_and_line(lh, landing):
    ok = landing / "ok.csv"
    ok.write_text("id,name\n1,a\n")
    published(lh, "raw.people", [str(ok)])
    bad = landing / "_big data.csv"
    bad.write_text("id,name\n" + "".join(f"{i},n{i}\n" for i in range(10_000)) + "10000,x,extra\n")
    res = refused(lh, "raw.people", [str(bad)], [str(bad), "line 10002", "malformed CSV record"], [bad])
    assert "wapflow-read-" not in res.message


# --- S3: keys are read as named; names Spark hides are refused ------------------------------------


@pytest.mark.spark
def test_s3_odd_names_publish_exactly_their_rows(spark, s3env, tmp_path):
    from support.s3_server import REGION
    from wapflow.config import parse_config
    from wapflow.lakehouse.lakehouse import Lakehouse

    landing, _ = s3env.buckets()
    names = [
        "d/batch[1].parquet",
        "d/b{1,2}.parquet",
        "d/star*.parquet",
        "d/with space.parquet",
        "d/pct%20x.parquet",
        "d/export_2026-01-01T10:00:00.parquet",
        "d/café.parquet",
        "dt=2026-01-01/part-0.parquet",
    ]
    put = [s3_put(s3env, landing, k) for k in names]
    s3_put(s3env, landing, "d/batch1.parquet")  # the lookalike a glob would read
    cfg = parse_config(
        {
            "lakehouse": {
                "warehouse": str(tmp_path / "lakehouse"),
                "catalog_name": f"srcs3{os.getpid()}",
                "master": "local[2]",
            },
            "s3": {"endpoint": s3env.endpoint, "region": REGION, **s3env.admin.as_dict()},
        }
    )
    cfg.base_dir = tmp_path
    lh = Lakehouse(cfg, spark=spark)
    res = published(lh, "raw.items", [u for u, _ in put])
    assert res.files == [u for u, _ in put]
    expected = sorted((r for _, t in put for r in t.to_pylist()), key=lambda r: r["id"])
    assert main_rows(lh, "raw.items") == expected
    assert main_columns(lh, "raw.items") == ["id", "name", "amount"]


@pytest.mark.spark
def test_s3_csv_is_checked_like_local_csv(spark, s3env):
    landing, _ = s3env.buckets()
    st = s3_storage(s3env)
    semi, _ = s3_put(s3env, landing, "c/semi[1].csv", body=b"id;name\n1;x\n")
    with pytest.raises(InputError, match=r"semi\[1\].csv does not look ','-delimited") as e:
        read_batch(spark, resolve_files([semi], st), "csv", {}, storage=st)
    assert 'sep = ";"' in e.value.hint
    bom, _ = s3_put(s3env, landing, "c/bom.csv", body="\ufeffid,name\n1,x\n".encode())
    ragged, _ = s3_put(s3env, landing, "c/ragged.csv", body=b"id,name\n1,x\n2\n")
    with pytest.raises(InputError, match=r"line 3 of s3://.*/c/ragged.csv has 1 value"):
        read_batch(spark, resolve_files([bom, ragged], st), "csv", {}, storage=st)


@pytest.mark.spark
def test_json_inference_failure_beyond_the_head_is_located(spark, landing):
    good, bad = landing / "a.jsonl", landing / "b.jsonl"
    good.write_text('{"id": 1}\n')
    bad.write_text("".join(f'{{"id": {i}, "pad": "{"x" * 60}"}}\n' for i in range(2000)) + '{"id": 2000, "pad": \n')
    assert bad.stat().st_size > 64 * 1024
    with pytest.raises(InputError) as e:
        read_batch(spark, resolve_files([str(good), str(bad)]), "json", {})
    assert str(bad) in e.value.message and "line 2001" in e.value.message and str(good) not in e.value.message
