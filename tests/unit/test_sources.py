"""What a run reads, without Spark (wapflow.storage.files, wapflow.files): file identities, names that are
files or patterns, folders and globs and what they skip, links for names Spark would misread, format detection,
S3 keys read as named. The Spark reads and whole runs over the same names: tests/spark/test_sources.py."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from support.landing_files import pq_write, s3_put, s3_storage
from wapflow.errors import InputError
from wapflow.files.resolve import resolve_files
from wapflow.files.spark_paths import SparkInputs, needs_link
from wapflow.storage import Storage
from wapflow.storage.files import FileIdentity, local_identity, spark_hides
from wapflow.writing.read import detect_format


def test_file_identity_round_trips_through_json_and_only_uri_size_version_count(landing):
    f = pq_write(landing / "a.parquet")
    [s] = resolve_files([str(f)])
    st = f.stat()
    assert isinstance(s, FileIdentity) and s == local_identity(f)
    assert (s.uri, s.size, s.version) == (str(f), st.st_size, f"mtime-{st.st_mtime_ns}-{st.st_size}")
    assert s.bucket is None and s.key == str(f) and s.modified is not None and s.modified.utcoffset() == timedelta(0)
    doc = json.loads(json.dumps(s.to_dict()))
    assert doc == {"uri": str(f), "size": st.st_size, "version": s.version, "modified": s.modified.isoformat()}
    back = FileIdentity.from_dict(doc)
    assert back == s and back.modified == s.modified
    # A run record written before `modified` existed reads back as the same identity.
    assert FileIdentity.from_dict({"uri": str(f), "size": st.st_size, "version": s.version}) == s
    # `modified` is for people: it takes no part in equality (nor in hashing, so sets and dict keys agree).
    later = FileIdentity(s.uri, s.size, s.version, modified=datetime(2030, 1, 1, tzinfo=UTC))
    assert later == s and len({later, s}) == 1
    assert FileIdentity(s.uri, s.size, "mtime-1-1") != s
    with pytest.raises(AttributeError):
        s.uri = "x"  # type: ignore[misc]  # frozen: the assignment must fail


def test_local_version_changes_on_a_same_size_rewrite_and_stays_when_untouched(landing):
    f = landing / "a.csv"
    f.write_text("id,name\n1,a\n")
    first = resolve_files([str(f)])[0]
    assert f.read_text() == "id,name\n1,a\n"  # reading it changes nothing
    assert resolve_files([str(f)])[0] == first and local_identity(f) == first
    time.sleep(0.02)  # one clock tick later: mtime granularity is a few ms on some kernels
    f.write_text("id,name\n2,b\n")  # same size, other bytes
    again = resolve_files([str(f)])[0]
    assert again.size == first.size and again.uri == first.uri
    assert again.version != first.version and again != first
    os.utime(f, ns=(1, 1_700_000_000_000_000_000))  # touch: the same bytes count as a new version (documented)
    assert resolve_files([str(f)])[0].version == f"mtime-1700000000000000000-{first.size}"


def test_storage_ls_and_run_sources_give_equal_identities(landing, tmp_path):
    """One listing: what `wap storage ls` shows of a folder is, identity for identity, what a run reads."""
    from typer.testing import CliRunner

    from wapflow.cli import app

    out = landing / "out"
    parts = [pq_write(out / n) for n in ("part-0.parquet", "sub/part-1.parquet", "_late[1].parquet")]
    (out / "_SUCCESS").write_bytes(b"")
    (out / ".part-0.parquet.crc").write_bytes(b"crc")
    pq_write(out / "_temporary" / "0" / "part-9.parquet")
    cfg = tmp_path / "wap.toml"
    cfg.write_text("[lakehouse]\n")
    r = CliRunner().invoke(app, ["storage", "ls", str(out), "--config", str(cfg), "--json"])
    assert r.exit_code == 0, r.output
    listed = [FileIdentity.from_dict(d) for d in json.loads(r.stdout)["files"]]
    resolved = resolve_files([str(out)])
    assert listed == list(resolved) and [f.uri for f in listed] == sorted(str(p) for p in parts)
    assert [f.modified for f in listed] == [f.modified for f in resolved]
    assert Storage().scan(str(out)).skipped == resolved.skipped  # the same bookkeeping skipped, for the same reasons
    globbed = Storage().list(str(out / "**" / "*.parquet"))
    assert globbed == resolve_files([str(out / "**" / "*.parquet")]) == listed


def test_an_existing_name_is_a_file_and_only_a_missing_one_is_a_pattern(landing):
    bracket, lookalike = pq_write(landing / "batch[1].parquet"), pq_write(landing / "batch1.parquet")
    assert [s.uri for s in resolve_files([str(bracket)])] == [str(bracket)]
    bracket.unlink()
    assert [s.uri for s in resolve_files([str(landing / "batch[1].parquet")])] == [str(lookalike)]  # now a pattern
    star = pq_write(landing / "star*.parquet")
    assert [s.uri for s in resolve_files([str(star)])] == [str(star)]
    assert len(resolve_files([str(landing / "*.parquet")])) == 2


def test_a_folder_reads_its_data_files_and_reports_what_it_skips(landing):
    out = landing / "out"
    parts = [pq_write(out / "part-00000-x.snappy.parquet"), pq_write(out / "sub" / "part-00001-x.snappy.parquet")]
    (out / "_SUCCESS").write_bytes(b"")
    (out / ".part-00000-x.snappy.parquet.crc").write_bytes(b"crc")
    (out / "_committed_123").write_text("{}")
    (out / ".DS_Store").write_bytes(b"\x00")
    pq_write(out / "_temporary" / "0" / "part-9.parquet")
    late = pq_write(out / "_late.parquet")  # not bookkeeping: data with an odd name is read
    got = resolve_files([str(out)])
    assert [s.uri for s in got] == sorted(str(p) for p in [*parts, late])
    reasons = {Path(k.uri).name: k.reason for k in got.skipped}
    assert reasons == {
        "_SUCCESS": "job marker",
        ".part-00000-x.snappy.parquet.crc": "checksum file",
        "_committed_123": "commit marker",
        ".DS_Store": "hidden file",
        "_temporary": "uncommitted Spark output folder",
    }
    msg = got.skipped_message()
    assert msg.startswith("skipped 5 bookkeeping files: ") and "_SUCCESS (job marker)" in msg


def test_a_glob_skips_bookkeeping_the_same_way_and_reads_every_other_match(landing):
    out = landing / "out"
    a, b = pq_write(out / "a.parquet"), pq_write(out / "_b.parquet")
    (out / "_SUCCESS").write_bytes(b"")
    pq_write(out / "_temporary" / "t.parquet")
    got = resolve_files([str(out / "*")])
    assert [s.uri for s in got] == [str(b), str(a)]
    assert got.skipped_message() == "skipped 1 bookkeeping file: _SUCCESS (job marker)"
    deep = resolve_files([str(out / "**" / "*.parquet")])
    assert [s.uri for s in deep] == [str(b), str(a)]
    assert [(Path(k.uri).name, k.reason) for k in deep.skipped] == [("_temporary", "uncommitted Spark output folder")]


def test_names_that_cannot_be_read_are_refused_by_name(landing):
    (landing / "_SUCCESS").write_bytes(b"")
    with pytest.raises(InputError, match=r"_SUCCESS is a Spark/Hadoop job marker, not a data file"):
        resolve_files([str(landing / "_SUCCESS")])
    with pytest.raises(InputError, match="no file matches"):
        resolve_files([str(landing / "none" / "*.parquet")])
    (landing / "emptydir").mkdir()
    with pytest.raises(InputError, match="emptydir holds no data files"):
        resolve_files([str(landing / "emptydir")])
    only = landing / "only"
    only.mkdir()
    (only / "_SUCCESS").write_bytes(b"")
    with pytest.raises(InputError, match=r"holds no data files \(only bookkeeping files: _SUCCESS\)"):
        resolve_files([str(only)])
    (landing / "loop_a.parquet").symlink_to(landing / "loop_b.parquet")
    (landing / "loop_b.parquet").symlink_to(landing / "loop_a.parquet")
    with pytest.raises(InputError, match=r"loop_a\.parquet is a symbolic link loop"):
        resolve_files([str(landing / "loop_a.parquet")])
    (landing / "gone.parquet").symlink_to(landing / "never.parquet")
    with pytest.raises(InputError, match=r"gone.parquet is a symbolic link to .*never.parquet, which does not exist"):
        resolve_files([str(landing / "gone.parquet")])


def test_an_unfinished_copy_in_a_folder_is_refused_but_read_when_named(landing):
    d = landing / "drop"
    pq_write(d / "a.parquet")
    copying = pq_write(d / "b.parquet._COPYING_")
    with pytest.raises(InputError, match=r"b.parquet._COPYING_ is still being copied"):
        resolve_files([str(d)])
    assert [s.uri for s in resolve_files([str(copying)])] == [str(copying)]


def test_which_paths_get_links():
    assert spark_hides("_x.parquet") and spark_hides(".x") and spark_hides("x._COPYING_")
    assert not spark_hides("_metadata") and not spark_hides("_a=1") and not spark_hides("a.parquet")
    assert not needs_link("/tmp/pytest-of-me/pytest-1/test_x0/landing/part-00000-ab.snappy.parquet")
    for odd in [
        "/l/_x.parquet",
        "/l/.x.parquet",
        "/l/x.parquet._COPYING_",
        "/l/b[1].parquet",
        "/l/a b.parquet",
        "/l/t10:00.csv",
        "/l/café.parquet",
        "/l/a%20b.parquet",
        "/l/h#1.csv",
        "/l/dt=2026-01-01/p.parquet",
        "/l/b{1,2}.json",
        "/l/q?.csv",
        "/l/back\\slash.csv",
        "/home/Jo Doe/x.csv",
    ]:
        assert needs_link(odd), odd


def test_spark_inputs_link_odd_names_and_remove_only_the_links(landing):
    plain, odd = pq_write(landing / "plain.parquet"), pq_write(landing / "_odd[1].csv.gz")
    srcs = resolve_files([str(plain), str(odd)])
    with SparkInputs(srcs) as inputs:
        assert inputs.paths[0] == str(plain)
        link = Path(inputs.paths[1])
        assert link.name == "f000001.csv.gz" and link.is_symlink() and link.resolve() == odd.resolve()
        assert link.parent.name.startswith("wapflow-read-")
    assert not link.parent.exists()
    assert plain.exists() and odd.exists()


def test_detect_format_sees_through_compression(landing):
    f = landing / "events.jsonl.gz"
    f.write_bytes(b"x")
    assert detect_format(resolve_files([str(f)]), None) == "json"


def test_s3_keys_are_read_as_named_and_prefixes_report_what_they_skip(s3env):
    landing, _ = s3env.buckets()
    st = s3_storage(s3env)
    bracket, _ = s3_put(s3env, landing, "d/batch[1].parquet")
    s3_put(s3env, landing, "d/batch1.parquet")
    [s] = resolve_files([bracket], st)
    head = s3env.client().head_object(Bucket=landing, Key="d/batch[1].parquet")
    assert s.uri == bracket and s.version == head["ETag"].strip('"') and s.size == head["ContentLength"]
    assert [x.uri for x in resolve_files([f"s3://{landing}/d/batch[0-9].parquet"], st)] == [
        f"s3://{landing}/d/batch1.parquet"
    ]
    p1, _ = s3_put(s3env, landing, "out/part-0.parquet")
    p2, _ = s3_put(s3env, landing, "out/sub/part-1.parquet")
    s3_put(s3env, landing, "out/_SUCCESS", body=b"")
    s3_put(s3env, landing, "out/_temporary/0/part-9.parquet")
    for source in (f"s3://{landing}/out", f"s3://{landing}/out/"):
        got = resolve_files([source], st)
        assert [x.uri for x in got] == [p1, p2]
        assert (
            got.skipped_message()
            == "skipped 2 bookkeeping files: _SUCCESS (job marker), _temporary/ (uncommitted Spark output folder)"
        )
    glob = resolve_files([f"s3://{landing}/out/*"], st)
    assert [x.uri for x in glob] == [p1] and [k.reason for k in glob.skipped] == ["job marker"]


def test_s3_version_is_the_etag_and_changes_when_the_object_is_overwritten(s3env):
    landing, _ = s3env.buckets()
    st = s3_storage(s3env)
    uri, _ = s3_put(s3env, landing, "v/a.parquet")
    s3_put(s3env, landing, "v/_SUCCESS", body=b"")
    head = s3env.client().head_object(Bucket=landing, Key="v/a.parquet")
    [first] = resolve_files([uri], st)
    assert first.version == head["ETag"].strip('"') and first.size == head["ContentLength"]
    assert first.bucket == landing and first.key == "v/a.parquet" and first.modified == head["LastModified"]
    assert FileIdentity.from_dict(json.loads(json.dumps(first.to_dict()))) == first
    # The folder, listed (as `wap storage ls` does) and resolved as run sources: equal identities.
    assert st.list(f"s3://{landing}/v/") == list(resolve_files([f"s3://{landing}/v/"], st)) == [first]
    assert resolve_files([uri], st)[0] == first  # untouched: the same identity
    s3_put(s3env, landing, "v/a.parquet")  # overwritten with other rows
    [second] = resolve_files([uri], st)
    assert second.uri == first.uri and second.version != first.version
    assert second.version == s3env.client().head_object(Bucket=landing, Key="v/a.parquet")["ETag"].strip('"')
    assert st.list(f"s3://{landing}/v/*.parquet") == [second]


def test_s3_names_spark_would_hide_are_refused_with_what_to_do(s3env):
    landing, _ = s3env.buckets()
    st = s3_storage(s3env)
    s3_put(s3env, landing, "g/a.parquet")
    hidden, _ = s3_put(s3env, landing, "g/_b.parquet")
    for source in (hidden, f"s3://{landing}/g/*.parquet", f"s3://{landing}/g/"):
        with pytest.raises(InputError) as e:
            resolve_files([source], st)
        assert hidden in e.value.message and "hidden files" in e.value.message
        assert f"aws s3 mv {hidden} s3://{landing}/g/b.parquet" in e.value.hint
    marker, _ = s3_put(s3env, landing, "g2/_SUCCESS", body=b"")
    with pytest.raises(InputError, match="_SUCCESS is a Spark/Hadoop job marker"):
        resolve_files([marker], st)
