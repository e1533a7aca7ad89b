"""Bad input: a clear message, the documented exit code, main unchanged, the file kept, the run recorded."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from support.data import trips_file, write_parquet
from wapflow.errors import InvalidIdentifier
from wapflow.pipeline import WapRun, run_wap
from wapflow.sql.identifiers import TableName

pytestmark = pytest.mark.spark
T = TableName.parse("nyc.trips")


@pytest.fixture
def seeded(trips_lakehouse, landing):
    """nyc.trips with one published batch, so 'main unchanged' has something to compare."""
    res = run_wap(trips_lakehouse, "nyc.trips", [str(trips_file(landing, "seed.parquet", 50))])
    assert res.status == "published"
    return trips_lakehouse


def _assert_failed_cleanly(lh, res, *, code: int, words: list[str], main_before, files: list[Path]):
    assert res.status == "failed"
    assert res.exit_code == code, res.message
    for w in words:
        assert w in res.message, (w, res.message)
    assert res.run_id in res.message  # a failed step names its run
    if main_before is not None:
        assert lh.tables.head(T) == main_before
        assert [b.name for b in lh.iceberg.list(T)] == []  # a failed write leaves no branch behind
    for f in files:
        assert f.exists()
    rec = lh.store.get(res.run_id)
    assert rec is not None and rec.status == "failed"
    assert rec.error["exit_code"] == code


def test_missing_file(seeded, landing):
    before = seeded.tables.head(T)
    res = run_wap(seeded, "nyc.trips", [str(landing / "nope.parquet")])
    # A name that names nothing is a usage error (exit 2), found before anything is written.
    _assert_failed_cleanly(seeded, res, code=2, words=["nope.parquet", "does not exist"], main_before=before, files=[])


def test_missing_file_suggests_a_close_name(seeded, landing):
    trips_file(landing, "trips_2026.parquet", 5)
    res = run_wap(seeded, "nyc.trips", [str(landing / "trips_2062.parquet")])
    assert "did you mean" in res.message and "trips_2026.parquet" in res.message


def test_empty_file(seeded, landing):
    before = seeded.tables.head(T)
    f = landing / "empty.parquet"
    f.write_bytes(b"")
    res = run_wap(seeded, "nyc.trips", [str(f)])
    _assert_failed_cleanly(seeded, res, code=3, words=["empty", "empty.parquet"], main_before=before, files=[f])


def test_corrupt_parquet(seeded, landing):
    before = seeded.tables.head(T)
    good = trips_file(landing, "good.parquet", 20)
    f = landing / "corrupt.parquet"
    f.write_bytes(good.read_bytes()[: good.stat().st_size // 2])  # truncated mid-file
    res = run_wap(seeded, "nyc.trips", [str(f)])
    _assert_failed_cleanly(
        seeded, res, code=3, words=["corrupt.parquet", "not a valid parquet"], main_before=before, files=[f]
    )


def test_csv_that_does_not_parse(lakehouse_factory, landing):
    lh = lakehouse_factory({"raw.people": {"checks": []}})  # about reading the file, not checks
    t = TableName.parse("raw.people")
    (landing / "ok.csv").write_text("id,score\n1,2.5\n")
    assert run_wap(lh, "raw.people", [str(landing / "ok.csv")]).status == "published"
    before = lh.tables.head(t)
    bad = landing / "bad.csv"
    bad.write_text('id,score\n2,3.5\n3,4.5,extra,fields\n4,"unterminated\n')
    res = run_wap(lh, "raw.people", [str(bad)])
    assert res.status == "failed", res.message
    assert res.exit_code == 3
    assert "bad.csv" in res.message
    assert lh.tables.head(t) == before
    assert lh.tables.row_count(t) == 1
    assert [b.name for b in lh.iceberg.list(t)] == []
    assert bad.exists()


def test_csv_with_wrong_type_for_the_table(lakehouse_factory, landing):
    lh = lakehouse_factory({"raw.people": {"checks": []}})  # about reading the file, not checks
    t = TableName.parse("raw.people")
    (landing / "ok.csv").write_text("id,score\n1,2.5\n")
    assert run_wap(lh, "raw.people", [str(landing / "ok.csv")]).status == "published"
    before = lh.tables.head(t)
    (landing / "text.csv").write_text("id,score\n1,high\n")
    res = run_wap(lh, "raw.people", [str(landing / "text.csv")])
    assert res.exit_code == 3
    assert "text.csv" in res.message and '"high"' in res.message
    assert lh.tables.head(t) == before
    assert lh.tables.row_count(t) == 1


def _assert_blocked_by_schema(lh, res, *, words: list[str], main_before, files: list[Path]):
    """A schema contract violation is an audit outcome: blocked (exit 1) by a failed `schema` check,
    nothing written, main unchanged, the diff in the report and the run store."""
    assert res.status == "blocked" and res.exit_code == 1, res.message
    assert res.error is None and res.rows_written == 0
    failed = [c for c in res.checks if c["status"] == "failed"]
    assert [c["check"] for c in failed] == ["schema"]
    for w in words:
        assert w in res.message, (w, res.message)
        assert w in failed[0]["observed"], (w, failed[0])
    assert lh.tables.head(T) == main_before
    assert [b.name for b in lh.iceberg.list(T)] == []  # nothing was written anywhere
    for f in files:
        assert f.exists()
    rec = lh.store.get(res.run_id)
    assert rec is not None and rec.status == "blocked" and rec.checks == res.checks


def test_schema_missing_column(seeded, landing):
    before = seeded.tables.head(T)
    table = pa.table({"trip_id": [1, 2], "fare_amount": [1.0, 2.0]})
    f = write_parquet(landing / "narrow.parquet", table)
    res = run_wap(seeded, "nyc.trips", [str(f)])
    _assert_blocked_by_schema(
        seeded,
        res,
        words=["missing column 'passenger_count'", "narrow.parquet does not match"],
        main_before=before,
        files=[f],
    )


def test_schema_incompatible_type(seeded, landing):
    before = seeded.tables.head(T)
    from wapflow.demo.generate import generate_trips

    t = generate_trips(10)
    idx = t.schema.get_field_index("passenger_count")
    t = t.set_column(idx, "passenger_count", pa.array(["two"] * 10))
    f = write_parquet(landing / "typed.parquet", t)
    res = run_wap(seeded, "nyc.trips", [str(f)])
    _assert_blocked_by_schema(
        seeded, res, words=["'passenger_count' is string in the batch but int"], main_before=before, files=[f]
    )


def test_schema_extra_column_suggests_the_renamed_one(seeded, landing):
    from wapflow.demo.generate import generate_trips

    t = generate_trips(10).rename_columns(
        [
            "trip_id",
            "vendor_id",
            "pickup_at",
            "dropoff_at",
            "passenger_cnt",
            "trip_distance",
            "fare_amount",
            "payment_type",
        ]
    )
    res = run_wap(seeded, "nyc.trips", [str(write_parquet(landing / "renamed.parquet", t))])
    assert res.exit_code == 1 and res.status == "blocked"
    assert "missing column 'passenger_count'" in res.message
    assert "did you mean 'passenger_cnt'" in res.message


@pytest.mark.parametrize(
    "name", ["nyc.trips'; DROP TABLE x; --", "nyc.`trips`", 'nyc."trips"', "trips", "nyc.tr ips", "nyc..trips"]
)
def test_bad_table_names_are_rejected_before_any_sql(seeded, landing, name):
    before = seeded.tables.head(T)
    f = trips_file(landing, "f.parquet", 5)
    res = run_wap(seeded, name, [str(f)])
    assert res.status == "failed"
    assert res.exit_code == 2
    assert "not allowed" in res.message or "needs a namespace" in res.message
    assert seeded.tables.head(T) == before
    assert seeded.store.get(res.run_id).status == "failed"


@pytest.mark.parametrize("branch", ["a;b", "a.b", "a`b", "a'b", 'a"b', "main", ""])
def test_bad_branch_names_are_rejected(seeded, landing, branch):
    before = seeded.tables.head(T)
    res = run_wap(seeded, "nyc.trips", [str(trips_file(landing, "f.parquet", 5))], branch=branch or " ")
    assert res.status == "failed" and res.exit_code == 2
    assert "branch name" in res.message
    assert seeded.tables.head(T) == before


def test_bad_run_id_is_rejected(seeded, landing):
    with pytest.raises(InvalidIdentifier):
        WapRun(seeded, "nyc.trips", ["x.parquet"], run_id="x'; --")


def test_unknown_column_in_a_check_suggests_close_names(lakehouse_factory, landing):
    lh = lakehouse_factory({"nyc.trips": {"checks": [{"check": "not_null", "column": "pasenger_count"}]}})
    f = trips_file(landing, "f.parquet", 5)
    res = run_wap(lh, "nyc.trips", [str(f)])
    assert res.exit_code == 2
    assert "pasenger_count" in res.message and "did you mean 'passenger_count'" in res.message
    assert not lh.tables.exists(T)  # found before anything was created
    assert f.exists()


def test_expression_on_unknown_column_is_a_config_error(lakehouse_factory, landing):
    lh = lakehouse_factory({"nyc.trips": {"checks": [{"check": "expression", "sql": "dropof_at >= pickup_at"}]}})
    res = run_wap(lh, "nyc.trips", [str(trips_file(landing, "f.parquet", 5))])
    assert res.exit_code == 2
    assert "dropof_at" in res.message
    assert not lh.tables.exists(T)


def test_non_boolean_expression_is_a_config_error(lakehouse_factory, landing):
    lh = lakehouse_factory({"nyc.trips": {"checks": [{"check": "expression", "sql": "fare_amount * 2"}]}})
    res = run_wap(lh, "nyc.trips", [str(trips_file(landing, "f.parquet", 5))])
    assert res.exit_code == 2 and "not a boolean" in res.message


def test_existing_foreign_branch_is_not_overwritten(seeded, landing):
    first = run_wap(
        seeded, "nyc.trips", [str(trips_file(landing, "bad.parquet", 10, null_rate=0.2, start_id=70))], branch="review"
    )
    assert first.status == "blocked"
    res = run_wap(seeded, "nyc.trips", [str(trips_file(landing, "f.parquet", 5, start_id=90))], branch="review")
    assert res.exit_code == 2 and "already exists" in res.message
    assert seeded.tables.row_count(T, "review") == 60  # the kept branch still holds the first run's rows
