"""control_totals' manifests without Spark: where a file's manifest is, what a JSON or CSV manifest declares, the
producer's mistakes as one line each, a pattern that would name a data file refused in wap.toml's words, and
a folder's listing skipping the manifest so a run never reads it as rows."""

from __future__ import annotations

import hashlib
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from wapflow.audit.batch_checks.control import ManifestError, manifest_for, parse_manifest
from wapflow.audit.spec import ControlTotalsCheck
from wapflow.storage import Storage


def test_a_manifest_is_found_beside_its_file_or_where_the_pattern_says():
    assert manifest_for("_manifest.json", "/land/day1/a.csv") == "/land/day1/_manifest.json"
    assert manifest_for("{name}.manifest.csv", "s3://b/day1/a.csv") == "s3://b/day1/a.csv.manifest.csv"
    assert manifest_for("{stem}.manifest.json", "/land/a.csv") == "/land/a.manifest.json"
    assert manifest_for("s3://ctl/{stem}.manifest.json", "s3://b/x/a.csv") == "s3://ctl/a.manifest.json"
    assert manifest_for("{dir}/../ctl/_manifest.json", "/land/day1/a.csv") == "/land/day1/../ctl/_manifest.json"


def test_a_json_manifest_declares_rows_sums_and_files_and_rows_add_up_from_its_files():
    d = parse_manifest(
        "/l/_manifest.json",
        b'{"sums": {"amount": 12625.10}, "files": {"a.csv": {"rows": 60, "bytes": 10, "sha256": "AB"},'
        b' "b.csv": {"rows": 40}}}',
    )
    assert d.rows == 100 and d.sums == {"amount": Decimal("12625.10")}  # a decimal as written, never a float
    assert d.files is not None and d.files["a.csv"].size == 10 and d.files["a.csv"].digests == {"sha256": "ab"}
    listed = parse_manifest("/l/_manifest.json", b'{"rows": 5, "files": [{"name": "a.csv", "md5": "x"}]}')
    assert listed.rows == 5 and listed.files is not None and listed.files["a.csv"].digests == {"md5": "x"}


def test_a_csv_manifest_adds_up_its_lines_and_other_columns_are_sums():
    text = b"file,rows,bytes,amount\na.csv,60,100,4575.00\nb.csv,40,80,8050.00\n"
    d = parse_manifest("/l/_manifest.csv", text)
    assert d.rows == 100 and d.sums == {"amount": Decimal("12625.00")}
    assert d.files is not None and sorted(d.files) == ["a.csv", "b.csv"] and d.files["b.csv"].size == 80


@pytest.mark.parametrize(
    "uri, text, says",
    [
        ("m.manifest.json", b'{"rows": 1', "it is not valid JSON"),
        ("m.manifest.json", b"[1, 2]", "it is not a JSON object"),
        ("m.manifest.json", b'{"row": 1}', "it has key(s) row; a manifest takes rows, sums and files"),
        ("m.manifest.json", b'{"rows": -1}', "rows is -1, not a count"),
        ("m.manifest.json", b'{"rows": 1.5}', "rows is 1.5, not a count"),
        ("m.manifest.json", b'{"sums": {"amount": "ten"}}', "the sum of amount is 'ten', not a number"),
        ("m.manifest.json", b'{"sums": {"amount": true}}', "the sum of amount is true, not a number"),
        ("m.manifest.json", b'{"files": {"a.csv": {"size": 1}}}', 'file "a.csv" has key(s) size'),
        ("m.manifest.json", b'{"files": [1]}', '"files" is neither an object'),
        ("m.manifest.json", b"\xff\xfe", "it is not UTF-8 text"),
        ("m.manifest.csv", b"name,rows\na.csv,1\n", "its header (name, rows) has no `file` column"),
        ("m.manifest.csv", b"file,rows,amount\na.csv,1,\n", "line 2 (a.csv) has no value for amount"),
        ("m.manifest.csv", b"file,rows\n,1\n", "line 2 names no file"),
    ],
)
def test_a_producers_mistake_is_one_line_saying_what_is_wrong(uri, text, says):
    with pytest.raises(ManifestError) as e:
        parse_manifest(uri, text)
    assert str(e.value) == says or str(e.value).startswith(says), str(e.value)


@pytest.mark.parametrize(
    "pattern, says",
    [
        ("orders.json", "names a file 'orders.json': a manifest is named _manifest.json or _manifest.csv"),
        ("{name}.json", "names a file 'orders-1.csv.json'"),
        ("{file}.manifest.json", "has a placeholder other than {dir}, {name} and {stem}"),
    ],
)
def test_a_manifest_pattern_a_listing_would_read_as_data_is_refused(pattern, says):
    with pytest.raises(ValidationError) as e:
        ControlTotalsCheck.model_validate({"check": "control_totals", "manifest": pattern})
    assert says in str(e.value)


def test_a_folder_listing_skips_manifests_and_storage_reads_and_digests_them(tmp_path: Path):
    (tmp_path / "a.csv").write_text("id\n1\n")
    (tmp_path / "_manifest.json").write_text('{"rows": 1}')
    (tmp_path / "a.csv.manifest.csv").write_text("file,rows\na.csv,1\n")
    storage = Storage()
    listing = storage.scan(str(tmp_path))
    assert [Path(f.uri).name for f in listing.files] == ["a.csv"]
    assert sorted((Path(s.uri).name, s.reason) for s in listing.skipped) == [
        ("_manifest.json", "delivery manifest"),
        ("a.csv.manifest.csv", "delivery manifest"),
    ]
    assert storage.read_if_exists(str(tmp_path / "_manifest.json")) == b'{"rows": 1}'
    assert storage.read_if_exists(str(tmp_path / "missing" / "_manifest.json")) is None
    assert storage.read_if_exists(str(tmp_path / "a.csv" / "_manifest.json")) is None  # under a file: not there
    data = (tmp_path / "a.csv").read_bytes()
    assert storage.digest(str(tmp_path / "a.csv"), "sha256") == hashlib.sha256(data).hexdigest()
    assert storage.digest(str(tmp_path / "a.csv"), "md5") == hashlib.md5(data).hexdigest()


# --- declared_in = "metadata": each file declares its own totals ---------------------------------------------------


def _judge(chk: ControlTotalsCheck, files: list[tuple[str, int | None]], storage: Storage, sums: dict[str, Any]):
    """The check's verdict on a batch of these files, `sums` standing for Spark's sums of the batch's columns."""
    from wapflow.audit.checktype import AuditContext, Compiled, Delivery

    c = Compiled(0, chk, None, None, None, "", {})  # type: ignore[arg-type]
    read = Delivery(files, storage.read_if_exists, storage.digest, metadata=storage.user_metadata, tail=storage.tail)
    ctx = AuditContext(delivery=read)
    assert ctx.delivery is not None
    values = chk.gathered(c, ctx.delivery, ["id", "amount"], lambda cols: {k: sums[k] for k in cols})
    return chk.verdict(c, values, int(sums["rows"]), ctx)


def test_a_files_own_metadata_declares_its_rows_sums_and_checksum(tmp_path: Path):
    import os

    chk = ControlTotalsCheck(check="control_totals", declared_in="metadata")
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    a.write_bytes(b"a" * 10)
    b.write_bytes(b"b" * 20)
    os.setxattr(a, "user.rows", b"60")
    os.setxattr(a, "user.sum-amount", b"4575.00")
    os.setxattr(a, "user.sha256", hashlib.sha256(b"a" * 10).hexdigest().encode())
    os.setxattr(a, "user.origin", b"the producer's own name, left alone")
    os.setxattr(b, "user.rows", b"40")
    os.setxattr(b, "user.sum_amount", b"8050.00")
    st = Storage()
    files: list[tuple[str, int | None]] = [(str(a), 10), (str(b), 20)]
    ok = _judge(chk, files, st, {"rows": 100, "amount": Decimal("12625.00")})
    assert ok.ok, ok.observed
    assert "rows 100 = declared" in str(ok.observed) and "sum(amount)" in str(ok.observed)
    short = _judge(chk, files, st, {"rows": 99, "amount": Decimal("12625.00")})
    assert not short.ok and "rows 99, declared 100 (difference 1, 1.00%)" in str(short.observed), short.observed
    a.write_bytes(b"x" * 10)  # replaced in place: the same size, another content
    os.setxattr(a, "user.sha256", hashlib.sha256(b"a" * 10).hexdigest().encode())
    swapped = _judge(chk, files, st, {"rows": 100, "amount": Decimal("12625.00")})
    assert not swapped.ok and "a.parquet's sha256 is" in str(swapped.observed), swapped.observed
    # A file that declares nothing: blocks, or warns with without_manifest = "warn".
    c = tmp_path / "c.parquet"
    c.write_bytes(b"c")
    bare = _judge(chk, [(str(c), 1)], st, {"rows": 5, "amount": 0})
    assert (
        not bare.ok and not bare.warn_only and f"no rows or sums declared in the metadata of {c}" in str(bare.observed)
    )
    warn = ControlTotalsCheck(check="control_totals", declared_in="metadata", without_manifest="warn")
    assert _judge(warn, [(str(c), 1)], st, {"rows": 5, "amount": 0}).warn_only
    os.setxattr(c, "user.rows", b"many")
    bad = _judge(chk, [(str(c), 1)], st, {"rows": 5, "amount": 0})
    assert not bad.ok and "c.parquet's metadata's rows is 'many', not a number" in str(bad.observed), bad.observed


def test_an_s3_objects_user_metadata_declares_its_totals(s3env):
    from wapflow.config import parse_config

    landing, _ = s3env.buckets()
    c = s3env.client()
    c.put_object(Bucket=landing, Key="d/a.parquet", Body=b"a" * 10, Metadata={"rows": "60", "sum-amount": "4575.00"})
    c.put_object(Bucket=landing, Key="d/b.parquet", Body=b"b" * 20, Metadata={"Rows": "40", "Sum-Amount": "8050"})
    st = Storage(parse_config({"s3": {"endpoint": s3env.endpoint, **s3env.admin.as_dict()}}).s3)
    chk = ControlTotalsCheck(check="control_totals", declared_in="metadata")
    files: list[tuple[str, int | None]] = [(f"s3://{landing}/d/a.parquet", 10), (f"s3://{landing}/d/b.parquet", 20)]
    assert st.user_metadata(files[1][0]) == {"rows": "40", "sum-amount": "8050"}
    assert _judge(chk, files, st, {"rows": 100, "amount": Decimal("12625.00")}).ok
    long = _judge(chk, files, st, {"rows": 200, "amount": Decimal("25250.00")})  # a duplicated delivery
    assert not long.ok and "rows 200, declared 100" in str(long.observed), long.observed
    assert st.user_metadata(f"s3://{landing}/d/none.parquet") is None


def test_waiting_for_metadata_is_refused_in_wap_tomls_words():
    with pytest.raises(ValidationError, match="a file's metadata lands with the file, so there is nothing to wait"):
        ControlTotalsCheck(check="control_totals", declared_in="metadata", wait="30m")


@pytest.mark.parametrize(
    "params, says",
    [
        ({"declared_in": "table"}, 'declared_in = "table" needs control_table'),
        ({"control_table": "ops.deliveries"}, "control_table 'ops.deliveries' is read only with declared_in"),
        ({"declared_in": "table", "control_table": "ops.d", "wait": "1h"}, "only a manifest is waited for"),
    ],
)
def test_a_control_table_is_named_with_declared_in_table_and_never_waited_for(params, says):
    with pytest.raises(ValidationError, match=says):
        ControlTotalsCheck(check="control_totals", **params)


def test_a_trailer_line_ending_each_file_declares_its_rows_and_sums(tmp_path: Path):
    from wapflow.audit.batch_checks.control import parse_trailer

    d = parse_trailer("/l/a.csv", b"id,amount\n1,2.50\n#rows=2, sum-amount=4.50; batch=7\n\n", "#")
    assert d is not None and d.rows == 2 and d.sums == {"amount": Decimal("4.50")}  # batch: the producer's own
    assert parse_trailer("/l/a.csv", b"id,amount\n1,2.50\n", "#") is None  # the last line is a row
    assert parse_trailer("/l/a.csv", b"#note=hello\n", "#") is None  # declares no rows or sums

    chk = ControlTotalsCheck(check="control_totals", declared_in="trailer")
    a = tmp_path / "a.csv"
    a.write_text("id,amount\n" + "".join(f"{i},2.50\n" for i in range(60)) + "#rows=60,sum-amount=150.00\n")
    st = Storage()
    assert _judge(chk, [(str(a), None)], st, {"rows": 60, "amount": Decimal("150.00")}).ok
    cut = _judge(chk, [(str(a), None)], st, {"rows": 59, "amount": Decimal("147.50")})  # a row lost on the way
    assert not cut.ok and "rows 59, declared 60" in str(cut.observed), cut.observed
    b = tmp_path / "b.csv"
    b.write_text("id,amount\n1,2.50\n")  # truncated before its trailer
    none = _judge(chk, [(str(b), None)], st, {"rows": 1, "amount": Decimal("2.50")})
    assert not none.ok and f"no trailer line starting with '#' declaring rows or sums ends {b}" in str(none.observed)
    b.write_text("id,amount\n1,2.50\n#rows=one\n")
    bad = _judge(chk, [(str(b), None)], st, {"rows": 1, "amount": Decimal("2.50")})
    assert "b.csv's trailer's rows is 'one', not a number" in str(bad.observed), bad.observed


def test_a_trailer_is_declared_only_where_spark_skips_it():
    from wapflow.config import parse_config
    from wapflow.errors import ConfigError

    check = {"check": "control_totals", "declared_in": "trailer"}
    with pytest.raises(
        ConfigError, match=re.escape('needs read_options = { comment = "#" }: Spark must skip the trailer')
    ):
        parse_config({"tables": {"shop.orders": {"checks": [check]}}})
    ok = parse_config({"tables": {"shop.orders": {"checks": [check], "read_options": {"comment": "#"}}}})
    assert ok.table("shop.orders").checks[0].declared_in == "trailer"
