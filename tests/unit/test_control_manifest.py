"""control_totals' manifests without Spark: where a file's manifest is, what a JSON or CSV manifest declares, the
producer's mistakes as one line each, a pattern that would name a data file refused in wap.toml's words, and
a folder's listing skipping the manifest so a run never reads it as rows."""

from __future__ import annotations

import hashlib
from decimal import Decimal
from pathlib import Path

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
