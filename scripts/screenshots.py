"""The dashboard's screenshots in docs/ (`make screenshots`): dashboard.png, dashboard-trend.png, dashboard-review.png.

Builds the demo lakehouse of the dashboard's tests (tests/support/dashboard_lake.py `build_trends`: published,
warned, blocked and held runs two hours apart; Spark starts in this process, then stops), serves it with
`wap dashboard` on a free port, and takes the overview, the Table page scrolled to its quality trends, and the
Review page in headless Chromium (Debian's chromium and chromium-driver, driven by Selenium by path: nothing is
downloaded). Every page is taken once its charts are drawn (their SVG marks are in the page).

    .venv/bin/python scripts/screenshots.py [--out docs] [--lake DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
WAP = str(Path(sys.executable).with_name("wap"))


def build(folder: Path) -> Path:
    """The demo lakehouse in `folder`; its wap.toml."""
    sys.path.insert(0, str(ROOT / "tests"))
    from support.dashboard_lake import build_trends

    lake = build_trends(None, folder, catalog="demo")
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    if spark is not None:
        spark.stop()
    return lake.config


@contextmanager
def serve(config: Path, home: Path) -> Iterator[str]:
    """`wap dashboard` on a free port until the block ends (no self-refresh while the pages are taken)."""
    import httpx

    from wapflow.lakehouse.processes import free_port

    port = free_port()
    log = open(home / "dashboard.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [WAP, "dashboard", "--config", str(config), "--port", str(port), "--refresh", "3600"],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "HOME": str(home), "XDG_RUNTIME_DIR": str(home)},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"wap dashboard stopped:\n{(home / 'dashboard.log').read_text()}")
            try:
                if httpx.get(f"{url}/_stcore/health", timeout=2).text == "ok":
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the dashboard did not come up in 60 s")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@contextmanager
def chromium(profile: Path) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000", "--hide-scrollbars"):
        opts.add_argument(arg)
    opts.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(driver: Any, *texts: str, charts: int = 0, timeout: float = 60) -> None:
    """Until the page shows every one of `texts` and at least `charts` drawn charts (SVG with marks)."""
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = driver.find_element(By.TAG_NAME, "body").text
        drawn = driver.execute_script("return document.querySelectorAll('svg.marks').length")
        if all(t in body for t in texts) and drawn >= charts:
            time.sleep(1.0)  # the last transitions
            return
        time.sleep(0.3)
    raise SystemExit(f"never saw {texts} and {charts} chart(s) on {driver.current_url}")


def take(url: str, out: Path, profile: Path) -> list[Path]:
    from selenium.webdriver.common.by import By

    shots = []
    with chromium(profile) as driver:
        driver.get(url)
        wait_for(driver, "Awaiting review", "Runs per day by status", charts=1)
        shots.append(out / "dashboard.png")
        driver.save_screenshot(str(shots[-1]))

        driver.get(f"{url}/?{urlencode({'page': 'Table', 'table': 'nyc.trips'})}")
        wait_for(driver, "Quality trends", "mean(fare_amount) per run", charts=5)
        heading = driver.find_element(By.XPATH, "//h3[normalize-space()='Quality trends']")
        driver.execute_script("arguments[0].scrollIntoView({block: 'start'})", heading)
        time.sleep(1.0)
        shots.append(out / "dashboard-trend.png")
        driver.save_screenshot(str(shots[-1]))

        driver.get(f"{url}/?{urlencode({'page': 'Review'})}")
        wait_for(driver, "Runs awaiting review", "Approve")
        shots.append(out / "dashboard-review.png")
        driver.save_screenshot(str(shots[-1]))
    return shots


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="where the PNGs go (default: docs/)")
    parser.add_argument("--lake", type=Path, help="build the lakehouse here (default: a temporary folder)")
    args = parser.parse_args()
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.path.exists(path):
            raise SystemExit(f"needs {path} (Debian: apt-get install chromium chromium-driver)")
    with tempfile.TemporaryDirectory(prefix="wap-screenshots-") as tmp:
        folder = args.lake or Path(tmp) / "lake"
        folder.mkdir(parents=True, exist_ok=True)
        if any(folder.iterdir()):
            raise SystemExit(f"{folder} is not empty: pass --lake with a new or empty folder")
        config = build(folder)
        home = Path(tmp) / "home"
        home.mkdir()
        with serve(config, home) as url:
            shots = take(url, args.out, home / "chromium")
    for shot in shots:
        print(f"wrote {shot} ({shot.stat().st_size // 1024} KB)")  # noqa: T201 - the outcome


if __name__ == "__main__":
    main()
