"""`make airflow-example`: the example in EXAMPLE_DIR, end to end through `airflow dags test` (Airflow's own venv).

A clean file: `land` publishes raw.trips, `daily` publishes gold.daily. A dirty one: `land` fails at once (blocked,
no retry) and `daily` never runs. The lakehouse stays for `wap runs`.
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


def main(folder: Path, airflow: Path) -> int:
    folder, airflow = folder.resolve(), airflow.absolute()  # the commands below run in `folder`
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "wap.toml", folder / "wap.toml")
    shutil.copytree(HERE / "dags", folder / "dags", dirs_exist_ok=True)
    clean = write_trips(folder / "landing" / "clean.parquet", 200)
    dirty = write_trips(folder / "landing" / "dirty.parquet", 200, null_rate=0.2, start_id=1000)
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(folder / "airflow-home"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(folder / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "WAP_CONFIG": str(folder / "wap.toml"),
    }
    subprocess.run([str(airflow), "db", "migrate"], env=env, cwd=folder, check=True, capture_output=True)
    codes = []
    for f in (clean, dirty):
        print(f'$ airflow dags test wap_trips -c \'{{"file": "{f.name}"}}\'', flush=True)
        cmd = [str(airflow), "dags", "test", "wap_trips", "-c", json.dumps({"file": str(f)})]
        done = subprocess.run(cmd, env=env, cwd=folder, check=False, capture_output=True, text=True)
        (folder / f"dags-test-{f.stem}.log").write_text(done.stdout + done.stderr)
        said = [ln for ln in (done.stdout + done.stderr).splitlines() if "wapflow" in ln and " run " in ln]
        print("\n".join(ln[ln.find("wapflow") :][:200] for ln in said[-2:]))
        codes.append(done.returncode)
    print(f"clean file: DAG run {_state(folder, 0)}; dirty file: DAG run {_state(folder, 1)} (land blocked)")
    wap = Path(sys.executable).with_name("wap")
    subprocess.run([str(wap), "runs", "--config", "wap.toml"], cwd=folder, check=False)
    return 0 if [_state(folder, 0), _state(folder, 1)] == ["success", "failed"] else 1


def _state(folder: Path, index: int) -> str:
    import sqlite3

    with sqlite3.connect(folder / "airflow-home" / "airflow.db") as db:
        rows = db.execute("SELECT state FROM dag_run WHERE dag_id = 'wap_trips' ORDER BY id").fetchall()
    return str(rows[-2:][index][0]) if len(rows) >= 2 else "missing"


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "example-airflow"), Path(sys.argv[2])))
