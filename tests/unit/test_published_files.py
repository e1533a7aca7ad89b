"""Which files a table published already, by identity (uri, size, version), from the run store: what `wap run`
refuses, `wap run-tables` fails and `wap ingest` settles with the run that published them. No JVM."""

from __future__ import annotations

from pathlib import Path

from wapflow.runs.store import RunRecord, RunStore


def _ids(n: int, *, size: int = 10, version: str = "v1", start: int = 0) -> list[dict[str, object]]:
    return [{"uri": f"/landing/f{i:05d}.parquet", "size": size, "version": version} for i in range(start, start + n)]


def test_thousands_of_files_are_found_by_identity_only(tmp_path: Path) -> None:
    store = RunStore(f"sqlite:///{tmp_path / 'runs.sqlite'}")
    first = RunRecord("r1", "nyc.trips", "published", snapshot_id=11)
    first.file_ids = _ids(1500)  # more uris than SQLite's 1,000-deep expression tree holds in one OR
    store.save(first)
    other = RunRecord("r2", "nyc.other", "published", snapshot_id=12)
    other.file_ids = _ids(10, start=2000)
    store.save(other)
    blocked = RunRecord("r3", "nyc.trips", "blocked")
    blocked.file_ids = _ids(10, start=3000)
    store.save(blocked)

    asked = _ids(1500) + _ids(5, start=2000) + _ids(5, start=3000)
    found = store.published_with("nyc.trips", asked)
    assert len(found) == 1500 and {rec.run_id for _, rec in found} == {"r1"}
    assert {f["uri"] for f, _ in found} == {f["uri"] for f in _ids(1500)}
    # Another size or version is another file (rewritten in place); another table's or a blocked run's is not it.
    assert store.published_with("nyc.trips", _ids(3, size=11) + _ids(3, version="v2")) == []
    assert store.published_with("nyc.trips", []) == []
    store.close()


def test_the_interrupted_run_of_thousands_of_files_is_found_by_exactly_those_files(tmp_path: Path) -> None:
    import socket

    store = RunStore(f"sqlite:///{tmp_path / 'runs.sqlite'}")
    dead = {"host": socket.gethostname(), "pid": 2**22 + 17, "start": 1.0}  # above Linux's pid_max: no process
    rec = RunRecord("r1", "nyc.trips", "running")
    rec.file_ids, rec.owner = _ids(1500), dead
    store.save(rec)
    assert store.interrupted_with(["nyc.trips"], _ids(1500)) is not None
    assert store.interrupted_with(["nyc.trips"], _ids(1500)[:-1]) is None  # not exactly its files
    assert store.interrupted_with(["nyc.trips"], _ids(1500, size=11)) is None
    store.close()


def test_the_interrupted_group_is_found_by_its_tables_in_order_and_their_files(tmp_path: Path) -> None:
    """`wap run-tables` of the same tables and files resumes the group: each place's run interrupted, published
    over the same files (killed while recording), or never started; anything else starts a new run."""
    import socket

    store = RunStore(f"sqlite:///{tmp_path / 'runs.sqlite'}")
    dead = {"host": socket.gethostname(), "pid": 2**22 + 17, "start": 1.0}
    orders, lines = _ids(2), _ids(3, start=10)
    first = RunRecord("g-1", "shop.orders", "running", group_id="g", branch="wap_g")
    first.file_ids, first.owner = orders, dead
    store.save(first)
    places = [(["shop.orders"], orders), (["shop.lines"], lines)]
    assert [r.run_id for r in store.interrupted_group(places)] == ["g-1"]  # shop.lines not started yet
    assert store.interrupted_group(places, "wap_g") != [] and store.interrupted_group(places, "other") == []
    assert store.interrupted_group(places[::-1]) == []  # another order: shop.orders was the run's first
    assert store.interrupted_group([(["shop.orders"], orders[:1]), places[1]]) == []  # other files
    second = RunRecord("g-2", "shop.lines", "published", group_id="g", branch="wap_g")
    second.file_ids = lines
    store.save(second)
    assert [r.run_id for r in store.interrupted_group(places)] == ["g-1"]  # killed while recording the publish
    assert store.interrupted_group(places[:1]) == []  # the run had a second table
    second.file_ids = _ids(3, start=20)
    store.save(second)
    assert store.interrupted_group(places) == []  # its second table ran other files
    store.close()


def test_the_ledger_records_a_file_published_already_as_published_in_the_same_insert(tmp_path: Path) -> None:
    """What `wap ingest` does with an unseen file another command published: it enters the ledger `published`
    with that run, never `pending` first (a crash between the two would publish it again)."""
    from datetime import UTC, datetime

    from wapflow.runs.ledger import Ledger
    from wapflow.storage.files import FileIdentity

    store = RunStore(f"sqlite:///{tmp_path / 'runs.sqlite'}")
    ledger = Ledger(store.engine)
    now = datetime.now(UTC)
    files = [(f"trips:{n}", FileIdentity(f"/l/{n}.parquet", 10, "v1", now)) for n in ("a", "b")]
    done = {"trips:a": {"run_id": "r1", "snapshot_id": 11, "reason": "published to nyc.trips already by run r1"}}
    assert ledger.add("trips", files, published=done) == 2
    rows = {r.key: r for r in ledger.rows("trips")}
    assert (rows["trips:a"].state, rows["trips:a"].run_id, rows["trips:a"].snapshot_id) == ("published", "r1", 11)
    assert rows["trips:a"].reason == done["trips:a"]["reason"]
    assert (rows["trips:b"].state, rows["trips:b"].run_id, rows["trips:b"].reason) == ("pending", None, None)
    assert ledger.add("trips", files) == 0  # known keys stay as they are
    store.close()
