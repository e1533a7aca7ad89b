"""`wap dashboard` in a real headless Chromium: what a person sees after real WAP runs.

The server is the real command (a `wap` process running `streamlit run`) on a free port; Selenium drives
Debian's chromium through Debian's chromedriver by path, so nothing is downloaded. Screenshots go to the
test's temp folder (docs/ has its own: `make screenshots`, scripts/screenshots.py). Without chromium the test
skips, except in CI (`CI` set), where it must run.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from support.cli_harness import WAP, env
from support.dashboard_lake import CLEAN_ROWS, DIRTY_ROWS, WATCHED, Lake, TrendLake, build, build_trends
from support.oidc_provider import CLIENT_SECRET, OidcProvider, oidc_toml
from wapflow.lakehouse.processes import free_port
from wapflow.runs.store import RunRecord, RunStore, runs_table

pytestmark = pytest.mark.spark
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def _need_chromium() -> None:
    if os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER):
        return
    message = f"needs {CHROMIUM} and {CHROMEDRIVER} (Debian: apt-get install chromium chromium-driver)"
    if os.environ.get("CI"):
        pytest.fail(message + "; .ci/run installs them in CI")
    pytest.skip(message)


@pytest.fixture(scope="module")
def lake(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Lake:
    _need_chromium()
    return build(spark, tmp_path_factory.mktemp("dashboard"))


@contextmanager
def _serve(config: Path, tmp_path: Path, **extra_env: str) -> Iterator[str]:
    """`wap dashboard` on a free port, up once its health endpoint answers; stopped afterwards."""
    port = free_port()
    log = open(tmp_path / "dashboard.log", "wb")  # noqa: SIM115 - closed in the finally below
    proc = subprocess.Popen(
        [WAP, "dashboard", "--config", str(config), "--port", str(port), "--refresh", "3"],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        # Streamlit's own files (~/.streamlit) and the login's secrets file stay in the test's folder.
        env=env(HOME=str(tmp_path), XDG_RUNTIME_DIR=str(tmp_path), **extra_env),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "dashboard.log").read_text()
            try:
                if httpx.get(f"{url}/_stcore/health", timeout=2).text == "ok":
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the dashboard did not come up in 60 s"
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
    # `wap dashboard` is the server (it execs Streamlit): stopping it leaves nothing serving the port.
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/_stcore/health", timeout=2)


@pytest.fixture
def server(lake: Lake, tmp_path: Path) -> Iterator[str]:
    with _serve(lake.config, tmp_path) as url:
        yield url


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000"):
        opts.add_argument(arg)
    opts.add_argument(f"--user-data-dir={tmp_path / 'chromium'}")
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


def _visible(driver: Any) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.TAG_NAME, "body").text)


def _code(driver: Any) -> str:
    """The text of the page's code blocks (commands, SQL), which Selenium's visible text leaves out."""
    return str(
        driver.execute_script("return [...document.querySelectorAll('code')].map(e => e.textContent).join('\\n')")
    )


def _wait_for(driver: Any, *texts: str, read: Any = _visible, timeout: float = 60) -> str:
    """The page's text once it holds every one of `texts` (Streamlit fills the page in after the socket opens)."""
    deadline = time.monotonic() + timeout
    body = ""
    while time.monotonic() < deadline:
        body = read(driver)
        if all(t in body for t in texts):
            return body
        time.sleep(0.3)
    raise AssertionError(f"never saw {texts} on {driver.current_url}; the page said:\n{body}")


def _metrics(driver: Any, expected: dict[str, str], timeout: float = 60) -> None:
    """Wait until each metric label's next line on the page is its expected value. Streamlit draws a page's
    elements one by one and redraws them on each refresh, so one read of the page may lack a metric."""
    deadline = time.monotonic() + timeout
    seen: dict[str, str | None] = {}
    while time.monotonic() < deadline:
        lines = _visible(driver).splitlines()
        seen = {k: lines[lines.index(k) + 1] if k in lines[:-1] else None for k in expected}
        if seen == expected:
            return
        time.sleep(0.3)
    raise AssertionError(f"on {driver.current_url} the metrics were {seen}, not {expected}")


def test_a_person_sees_main_rows_and_the_blocked_check(server: str, browser: Any, lake: Lake, tmp_path: Path):
    browser.get(server)
    _wait_for(browser, "nyc.trips rows on main", "Kept branches", "Runs per day by status")
    _metrics(browser, {"nyc.trips rows on main": str(CLEAN_ROWS), "Blocked": "1", "Published": "1"})
    time.sleep(1)  # the charts draw after the text
    browser.save_screenshot(str(tmp_path / "overview.png"))

    browser.get(f"{server}/?{urlencode({'page': 'Run', 'run_id': lake.blocked_run})}")
    nulls = lake.dirty_nulls["passenger_count"]
    _wait_for(
        browser, f"run {lake.blocked_run}", f"not_null(passenger_count): {nulls} failing rows", "publish after a fix"
    )
    _metrics(browser, {"Status": "blocked"})
    # The reproduction SQL and the commands are code blocks; Streamlit may fill them in one by one.
    _wait_for(
        browser,
        "`passenger_count` IS NULL",
        f"wap discard {lake.branch} --table nyc.trips",
        f"wap retry {lake.blocked_run}",
        read=_code,
    )
    browser.save_screenshot(str(tmp_path / "run.png"))

    browser.get(f"{server}/?{urlencode({'page': 'Branch', 'branch': lake.branch})}")
    _wait_for(browser, f"branch {lake.branch}", "nulls per column of the new rows")
    _metrics(browser, {"Rows added": str(DIRTY_ROWS)})
    browser.save_screenshot(str(tmp_path / "branch.png"))
    for name in ("overview.png", "run.png", "branch.png"):
        assert (tmp_path / name).stat().st_size > 10_000, name  # a rendered page, not a blank one

    # The page refreshes itself (--refresh 3): a run recorded now shows without reloading.
    browser.get(server)
    _wait_for(browser, "nyc.trips rows on main")
    store = RunStore(f"sqlite:///{lake.config.parent / 'lakehouse' / 'wapflow_runs.db'}")
    rec = RunRecord("20991231t000000_b10c4d", "nyc.trips", "failed", started_at=datetime.now(UTC))
    store.save(rec)
    try:
        _metrics(browser, {"Runs": "3"}, timeout=30)  # within 30 s of refreshes, without reloading
    finally:
        with store.engine.begin() as conn:
            conn.execute(runs_table.delete().where(runs_table.c.run_id == rec.run_id))
        store.close()


# The values the page cuts: a metric's value or a bold word (a status, a table name) with an element of it
# narrower than its text (Streamlit ends a metric's value with "…").
CUT_VALUES = """
return [...document.querySelectorAll('[data-testid="stMetricValue"], [data-testid="stMarkdownContainer"] strong')]
  .filter(m => [m, ...m.querySelectorAll('*')].some(e => e.scrollWidth > e.clientWidth + 1))
  .map(m => m.textContent)
"""


def test_a_person_approves_a_held_run_with_one_click(
    spark: Any, browser: Any, tmp_path: Path, landing: Path, oidc_provider: OidcProvider
):
    """The Review page in Chromium, with [dashboard.oidc]: the person logs in through the (local) identity
    provider, then Approve, a reason, Confirm; the dashboard's process publishes the run (its own JVM starts for
    it), main read back with PyIceberg, who (the provider's identity, not a typed name) and why in the run store
    and in the published snapshot's summary."""
    import json

    from pyiceberg.catalog.sql import SqlCatalog
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    from support.data import trips_file
    from support.typer_cli import wap
    from wapflow.lakehouse.lineage import approval_of

    _need_chromium()
    cfg = tmp_path / "wap.toml"
    wh = tmp_path / "lakehouse"
    cfg.write_text(
        f'[lakehouse]\nwarehouse = "{wh}"\ncatalog_name = "rv_browser"\nmaster = "local[1]"\n\n'
        '[tables."nyc.trips"]\nreview = "always"\nchecks = []\n' + oidc_toml(oidc_provider, "TEST_OIDC_SECRET")
    )
    r = wap("run", "nyc.trips", str(trips_file(landing, "held.parquet", 50)), "--config", str(cfg), "--json")
    run = json.loads(r.stdout)["run_id"]
    assert r.exit_code == 6, r.output
    with _serve(cfg, tmp_path, TEST_OIDC_SECRET=CLIENT_SECRET) as url:
        # The held run's page: its status and table read whole, not cut with "…".
        # At 1100 pixels, where st.metric cut it to "awaiting_re…".
        browser.set_window_size(1100, 1000)
        browser.get(f"{url}/?{urlencode({'page': 'Run', 'run_id': run})}")
        _wait_for(browser, f"run {run}")
        _metrics(browser, {"Status": "awaiting_review", "Rows written": "50"})
        assert browser.execute_script(CUT_VALUES) == [], browser.execute_script(CUT_VALUES)
        browser.set_window_size(1400, 1000)
        review = f"{url}/?{urlencode({'page': 'Review'})}"
        browser.get(review)
        _wait_for(browser, "Runs awaiting review", f"run {run}", "Log in with Test IdP to approve or reject")

        def button(text: str) -> Any:
            """The button labelled `text`, once Streamlit has drawn it."""
            deadline = time.monotonic() + 60
            while not (found := browser.find_elements(By.XPATH, f"//button[normalize-space()='{text}']")):
                assert time.monotonic() < deadline, f"no button {text!r} on {browser.page_source[-3000:]}"
                time.sleep(0.3)
            return found[0]

        assert not browser.find_elements(By.XPATH, "//button[normalize-space()='Approve']")  # not before a login
        button("Log in with Test IdP").click()  # to the provider and back, then Streamlit's home page
        deadline = time.monotonic() + 30
        while browser.get_cookie("_streamlit_user") is None:  # Streamlit's signed identity cookie
            assert time.monotonic() < deadline, f"not logged in; the provider refused: {oidc_provider.token_errors}"
            time.sleep(0.3)
        assert [c["email"] for c in oidc_provider.issued] == ["alice@example.com"]
        browser.get(review)
        _wait_for(browser, "logged in with Test IdP as alice@example.com")
        # One login, one token; the browser may ask the provider to authorize more than once on a slow machine
        # (a page reload during the redirects), and every request must come back to the dashboard with PKCE.
        assert oidc_provider.authorized
        for asked in oidc_provider.authorized:
            assert asked["redirect_uri"] == f"{url}/oauth2callback" and asked["code_challenge_method"] == "S256"
        button("Approve").click()
        _wait_for(browser, f"Why approve run {run}?")
        assert "Your name" not in _visible(browser)  # the provider says who decides
        box = browser.find_element(By.CSS_SELECTOR, f"input[aria-label^='Why approve run {run}']")
        box.send_keys("checked in the browser", Keys.ENTER)
        time.sleep(1.5)  # the entered reason reaches the server before the confirmation
        button("Confirm approve").click()
        _wait_for(browser, "no run awaits review", timeout=240)  # the dashboard's own Spark publishes it
        browser.save_screenshot(str(tmp_path / "review.png"))
        log = (tmp_path / "dashboard.log").read_text()
    assert CLIENT_SECRET not in log
    [secrets_file] = (tmp_path / "wapflow" / "dashboard").glob("secrets-*.toml")
    assert secrets_file.stat().st_mode & 0o777 == 0o600 and secrets_file.parent.stat().st_mode & 0o777 == 0o700
    store = RunStore(f"sqlite:///{wh / 'wapflow_runs.db'}")
    rec = store.get(run)
    assert rec is not None and (rec.status, rec.review, rec.review_by, rec.review_reason) == (
        "published",
        "approved",
        "alice@example.com",
        "checked in the browser",
    )
    catalog = SqlCatalog("rv_browser", uri=f"sqlite:///{wh / 'catalog.db'}", warehouse=f"file://{wh}")
    table = catalog.load_table("nyc.trips")
    assert len(table.scan().to_arrow()) == 50
    snapshot = table.current_snapshot()
    assert snapshot is not None and approval_of(snapshot.summary) == ("alice@example.com", "checked in the browser")


# Each chart's marks as the page holds them (SVG): shaded areas, the fills of the data points, the x axis's tick
# labels and the legend's labels.
CHART_MARKS = """
return [...document.querySelectorAll('svg.marks')].map(svg => ({
  areas: [...svg.querySelectorAll('g.mark-area path')].filter(p => (p.getAttribute('d') || '').length > 10).length,
  fills: [...new Set([...svg.querySelectorAll('g.mark-symbol.role-mark path')].map(p => p.getAttribute('fill')))],
  x: [...svg.querySelectorAll('g.role-axis')]
    .filter(a => (a.getAttribute('aria-label') || '').startsWith('X-axis'))
    .flatMap(a => [...a.querySelectorAll('g.role-axis-label text')].map(t => t.textContent)),
  legend: [...svg.querySelectorAll('g.role-legend-label text')].map(t => t.textContent),
}))
"""
# A tick label a person reads: 24-hour time (seconds where the runs span minutes), or a date.
TICK = re.compile(r"([01]\d|2[0-3]):[0-5]\d(:[0-5]\d)?|[A-Z][a-z]{2} \d{2}")


@pytest.fixture(scope="module")
def trends(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> TrendLake:
    _need_chromium()
    return build_trends(spark, tmp_path_factory.mktemp("trends"))


def _charts(driver: Any, ready: Any, timeout: float = 60) -> list[dict[str, Any]]:
    """The page's charts once `ready(charts)` holds (the page redraws them on each refresh)."""
    deadline = time.monotonic() + timeout
    charts: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        charts = driver.execute_script(CHART_MARKS)
        if ready(charts):
            return charts
        time.sleep(0.5)
    raise AssertionError(f"the charts on {driver.current_url} never were as expected: {charts}")


def test_trends_a_person_reads(trends: TrendLake, browser: Any, tmp_path: Path):
    """Published, warned, blocked and held runs two hours apart: the overview counts the held run apart from the
    kept branch; on the Table page each trend has its band shaded, a point colour per status and 24-hour or
    date ticks; the picker starts on the metric the anomaly check watches."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    with _serve(trends.config, tmp_path) as url:
        browser.get(url)
        _wait_for(browser, "Awaiting review", "Kept branches", "1 run(s) awaiting review")
        _metrics(browser, {"Awaiting review": "1", "Kept branches": "1", "Blocked": "1"})

        browser.get(f"{url}/?{urlencode({'page': 'Table', 'table': 'nyc.trips'})}")
        _wait_for(browser, "Quality trends", f"{WATCHED} per run by the time it ran")

        def trends_drawn(charts: list[dict[str, Any]]) -> bool:
            return len([c for c in charts if c["areas"]]) == 2 and all(c["x"] for c in charts)

        charts = _charts(browser, trends_drawn)
        browser.save_screenshot(str(tmp_path / "trends.png"))
        banded = [c for c in charts if c["areas"]]  # row_count and the watched metric
        for chart in banded:
            assert len(chart["fills"]) == 4, chart  # published, warned, blocked, held: a colour each
            assert chart["legend"] == ["published", "warned", "blocked", "held"], chart
        for chart in charts:
            assert chart["x"] and all(TICK.fullmatch(label) for label in chart["x"]), chart["x"]
        assert any(int(label[:2]) >= 13 for c in banded for label in c["x"] if ":" in label)  # 24-hour
        outcomes = next(c for c in charts if "warned" in c["legend"] and not c["areas"])
        assert outcomes["legend"][:3] == ["passed", "warned", "failed"]  # the warned anomaly counts as warned

        picker = next(
            e
            for e in browser.find_elements(By.CSS_SELECTOR, "[data-testid='stSelectbox']")
            if "column metric" in e.text
        )
        box = picker.find_element(By.TAG_NAME, "input")
        assert WATCHED in f"{picker.get_attribute('textContent')} {box.get_attribute('value')}"  # the one shown
        box.click()
        deadline = time.monotonic() + 30
        while not (options := [o.text for o in browser.find_elements(By.CSS_SELECTOR, "[role='option']")]):
            assert time.monotonic() < deadline, "the picker never opened"
            time.sleep(0.3)
        box.send_keys(Keys.ESCAPE)
        assert options[0] == WATCHED and options[1:] == sorted(options[1:]), options
