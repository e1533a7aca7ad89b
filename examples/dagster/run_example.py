"""`make dagster-example`: the example in EXAMPLE_DIR, end to end through the `dagster` CLI.

A clean file materializes raw.trips and gold.daily (every check passed); a dirty one fails raw.trips's blocking
not_null check, so nothing is published and gold.daily is not materialized. The lakehouse stays for `wap runs`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from wapflow.demo.generate import write_trips

HERE = Path(__file__).resolve().parent


def main(folder: Path) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("wap.toml", "definitions.py", "wap_defs"):
        src, dst = HERE / name, folder / name
        shutil.copytree(src, dst, dirs_exist_ok=True) if src.is_dir() else shutil.copy(src, dst)
    clean = write_trips(folder / "landing" / "clean.parquet", 200)
    dirty = write_trips(folder / "landing" / "dirty.parquet", 200, null_rate=0.2, start_id=1000)
    (folder / "dagster-home").mkdir(exist_ok=True)
    dagster = Path(sys.executable).with_name("dagster")
    codes = []
    for f in (clean, dirty):
        config = json.dumps({"ops": {"raw_trips": {"config": {"files": [str(f.resolve())]}}}})
        cmd = [str(dagster), "asset", "materialize", "-f", "definitions.py", "--select", "*", "--config-json", config]
        print(f"$ dagster asset materialize ... {f.name}", flush=True)
        home = {"DAGSTER_HOME": str(folder / "dagster-home")}
        done = subprocess.run(cmd, cwd=folder, env={**os.environ, **home}, check=False)
        codes.append(done.returncode)
    print(f"clean file: exit {codes[0]} (published); dirty file: exit {codes[1]} (blocked, gold.daily not run)")
    wap = Path(sys.executable).with_name("wap")
    subprocess.run([str(wap), "runs", "--config", "wap.toml"], cwd=folder, check=False)
    return 0 if codes[0] == 0 and codes[1] != 0 else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "example-dagster")))
