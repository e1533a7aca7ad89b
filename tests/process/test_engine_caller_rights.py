"""Issue 49: the warm engine must not read for a `wap` process what that process itself may not read.

The engine is started by a first `wap run` with full rights. Then root without CAP_DAC_OVERRIDE and
CAP_DAC_READ_SEARCH (setpriv, util-linux) runs `wap run` on a file of mode 000, on a folder holding one, and on a
folder it may not list: each ends in its client with the error a run without the engine gives (exit 3, "cannot
be read: permission denied", the path named; `--no-engine` shows it), and main is unchanged (read by
PyIceberg). Before this, the engine read the file and published it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.cli_harness import WAP, Proc, Reader, env, unique_catalog
from support.data import trips_file
from support.engines import engine_runtime

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SETPRIV = shutil.which("setpriv")
if SETPRIV is None or os.geteuid() != 0:
    pytest.skip("needs setpriv (util-linux) and root, to drop the DAC capabilities", allow_module_level=True)

TABLE = "e.trips"
CATALOG = unique_catalog("rights")
# Root without the capabilities that let it read any file: file modes apply to it, as to any user.
NO_DAC = [
    "--bounding-set=-dac_override,-dac_read_search",
    "--inh-caps=-all",
    "--ambient-caps=-all",
]


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    folder = tmp_path_factory.mktemp("rights")
    (folder / "wap.toml").write_text(
        f'[lakehouse]\nwarehouse = "{folder / "lakehouse"}"\ncatalog_name = "{CATALOG}"\nmaster = "local[2]"\n'
        'driver_memory = "1g"\nengine = "auto"\nengine_idle = "10m"\n'
        '[lakehouse.spark_conf]\n"spark.sql.shuffle.partitions" = "2"\n\n'
        f'[tables."{TABLE}"]\nchecks = [{{ check = "not_null", column = "passenger_count" }}]\n\n'
        f'[sources.drop]\ntable = "{TABLE}"\nlocation = "{folder / "drop"}"\nsettle_seconds = 0\n'
    )
    with engine_runtime() as runtime:
        yield folder, env(XDG_RUNTIME_DIR=str(runtime), WAP_ENGINE="")


def wap(lake: tuple[Path, dict[str, str]], *args: str, prefix: tuple[str, ...] = ()) -> Proc:
    folder, e = lake
    p = subprocess.run(
        [*prefix, WAP, *args, "-c", str(folder / "wap.toml")],
        capture_output=True,
        text=True,
        timeout=400,
        env=e,
        stdin=subprocess.DEVNULL,
        cwd=folder,
    )
    return Proc(p.returncode, p.stdout, p.stderr)


def test_a_file_the_caller_cannot_read_is_refused_though_the_engine_could(lake) -> None:
    folder, _ = lake
    landing = folder / "landing"
    first = wap(lake, "run", TABLE, str(trips_file(landing, "a.parquet", 50)))
    assert first.code == 0 and "starting the wapflow engine" in first.stderr, first.text
    reader = Reader(folder, catalog=CATALOG)
    main = reader.main(TABLE)
    rows = len(reader.rows(TABLE))

    secret = trips_file(landing, "secret.parquet", 20, start_id=1000)
    secret.chmod(0)
    assert subprocess.run([SETPRIV, *NO_DAC, "cat", str(secret)], capture_output=True).returncode != 0

    refused = wap(lake, "run", TABLE, str(secret), prefix=(SETPRIV, *NO_DAC))
    assert refused.code == 3, refused.text
    assert f"{secret} cannot be read: permission denied" in refused.stderr, refused.text
    assert "give the user running wap read access to the file" in refused.stderr
    assert "Traceback" not in refused.text

    # What the same command says without the engine (a JVM of its own, with the caller's rights).
    alone = wap(lake, "run", TABLE, str(secret), "--no-engine", prefix=(SETPRIV, *NO_DAC))
    assert alone.code == 3, alone.text
    assert f"{secret} cannot be read: permission denied" in alone.stderr and "bug" not in alone.stderr, alone.text

    as_json = wap(lake, "run", TABLE, str(secret), "--json", prefix=(SETPRIV, *NO_DAC))
    assert as_json.code == 3, as_json.text
    assert as_json.doc["status"] == "failed"
    assert as_json.doc["error"]["kind"] == "input" and as_json.doc["error"]["exit_code"] == 3
    assert as_json.doc["error"]["message"] == f"{secret} cannot be read: permission denied"

    # A folder holding the file (beside a readable one), and a folder the caller may not list.
    batch = landing / "batch"
    trips_file(batch, "ok.parquet", 10, start_id=2000)
    shutil.copy(secret, batch / "secret.parquet")
    (batch / "secret.parquet").chmod(0)
    in_folder = wap(lake, "run", TABLE, str(batch), prefix=(SETPRIV, *NO_DAC))
    assert in_folder.code == 3, in_folder.text
    assert f"{batch / 'secret.parquet'} cannot be read: permission denied" in in_folder.stderr, in_folder.text

    closed = landing / "closed"
    trips_file(closed, "c.parquet", 10, start_id=3000)
    closed.chmod(0)
    try:
        unlisted = wap(lake, "run", TABLE, str(closed), prefix=(SETPRIV, *NO_DAC))
    finally:
        closed.chmod(0o755)
    assert unlisted.code == 3, unlisted.text
    assert f"{closed} cannot be read: permission denied" in unlisted.stderr, unlisted.text
    assert "read access to the folder" in unlisted.stderr

    # An ingest of a source whose location holds the file: the engine would list and read it for the caller.
    drop = folder / "drop"
    trips_file(drop, "fine.parquet", 10, start_id=4000)
    shutil.copy(secret, drop / "secret.parquet")
    (drop / "secret.parquet").chmod(0)
    ingested = wap(lake, "ingest", "drop", prefix=(SETPRIV, *NO_DAC))
    assert ingested.code == 3, ingested.text
    assert f"{drop / 'secret.parquet'} cannot be read: permission denied" in ingested.stderr, ingested.text

    assert reader.main(TABLE) == main and len(reader.rows(TABLE)) == rows  # main unchanged

    # The same caller, a file it may read: served by the engine as before.
    fine = wap(lake, "run", TABLE, str(trips_file(landing, "b.parquet", 30, start_id=500)), prefix=(SETPRIV, *NO_DAC))
    assert fine.code == 0 and "starting the wapflow engine" not in fine.stderr, fine.text
    assert len(reader.rows(TABLE)) == rows + 30
