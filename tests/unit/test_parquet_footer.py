"""A parquet footer's signature: what Spark infers a batch's schema from (write.read memoizes by it)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from support.data import write_parquet
from wapflow.files.parquet_checks import check_parquet_schemas, parquet_footer
from wapflow.files.resolve import resolve_files


def _sig(path: Path) -> str:
    footer = parquet_footer(resolve_files([str(path)])[0], None)
    assert footer is not None
    return footer.signature


def test_files_of_one_schema_share_a_signature_whatever_their_rows(tmp_path: Path) -> None:
    a = write_parquet(tmp_path / "a.parquet", pa.table({"id": [1, 2], "name": ["x", "y"]}))
    b = write_parquet(tmp_path / "b.parquet", pa.table({"id": [7] * 1000, "name": ["z"] * 1000}))
    assert _sig(a) == _sig(b)
    assert "int64" in _sig(a) and "name (String)" in _sig(a)
    assert check_parquet_schemas(resolve_files([str(a), str(b)])) == _sig(a)


def test_types_the_arrow_schema_hides_are_in_the_signature(tmp_path: Path) -> None:
    stamps = pa.table({"at": pa.array([1_700_000_000_000_000], pa.timestamp("us"))})
    int64 = write_parquet(tmp_path / "int64.parquet", stamps)
    int96 = tmp_path / "int96.parquet"
    pq.write_table(stamps, int96, use_deprecated_int96_timestamps=True)
    assert _sig(int64) != _sig(int96)
    # Same column names, other types: no common signature for the batch, so no schema is reused for it.
    text = write_parquet(tmp_path / "text.parquet", pa.table({"at": ["2026-01-01"]}))
    assert check_parquet_schemas(resolve_files([str(int64), str(text)])) is None


def test_sparks_own_schema_in_the_footer_is_in_the_signature(tmp_path: Path) -> None:
    table = pa.table({"c": ["a"]})
    plain = write_parquet(tmp_path / "plain.parquet", table)
    spark_meta = b'{"type":"struct","fields":[{"name":"c","type":"char(1)","nullable":true,"metadata":{}}]}'
    by_spark = write_parquet(
        tmp_path / "spark.parquet",
        table.replace_schema_metadata({"org.apache.spark.sql.parquet.row.metadata": spark_meta}),
    )
    assert _sig(plain) != _sig(by_spark)
    assert "char(1)" in _sig(by_spark)
