"""Land a file, WAP it, alert on failure: plain Python, for cron, a script or a notebook.

python examples/plain_python.py wap.toml landing/trips/2026-11-22.parquet
"""

import os
import sys

import httpx

import wapflow
from wapflow import checks as C


def alert(res: wapflow.RunResult) -> None:
    """A Slack incoming webhook (or any JSON webhook) from $WAP_ALERT_URL; else stderr."""
    text = f"WAP {res.status} on {res.table}, run {res.run_id}: {res.message}"
    url = os.environ.get("WAP_ALERT_URL")
    if url:
        httpx.post(url, json={"text": text}, timeout=10).raise_for_status()
    else:
        print(text, file=sys.stderr)


def main(config: str, path: str) -> int:
    lh = wapflow.connect(config)
    res = wapflow.run(lh, "nyc.trips", [path], checks=[C.not_null("passenger_count")])
    if res.status != "published":
        alert(res)
    print(f"{res.status} {res.run_id} snapshot={res.snapshot_id}")
    return res.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
