"""The wapflow dashboard: `wap dashboard` runs this file with `streamlit run`.

It only renders. Every number comes from wapflow.service.dashboard and service.review_queue (run store, ledger,
and Iceberg metadata through PyIceberg: no Spark, no JVM). The one write, approving or rejecting a held run on
the Review page, calls the functions `wap approve` / `wap reject` call (Spark starts in this process then). With
[dashboard.oidc] it needs a login with that provider (`st.login`; the decider recorded is who the provider says);
otherwise, bound beyond loopback, $WAP_DASHBOARD_TOKEN entered once per session (review_queue.writes_allowed).
Reads are cached, keyed on the run store's change token, so a new run
shows at the next refresh, and the page body refreshes on its own every $WAP_DASHBOARD_REFRESH seconds.
The config is $WAP_CONFIG (set by `wap dashboard --config`), else ./wap.toml, else the defaults.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

import streamlit as st

from wapflow.dashboard import charts
from wapflow.display import is_id, is_whole, rounded
from wapflow.errors import WapError
from wapflow.service import dashboard as svc
from wapflow.service import dashboard_login as login
from wapflow.service import render
from wapflow.service import review_queue as rq
from wapflow.service.runs import AWAITING_REVIEW

PAGES = ("Overview", "Review", "Table", "Run", "Branch")
REFRESH_SECONDS = float(os.environ.get("WAP_DASHBOARD_REFRESH", "10"))
# A decider's typed name, with " (dashboard)" after it, within what the run store keeps (service.review: 256): the
# box stops there, so the service's "--by is longer than" never reaches the page.
NAME_CHARS = 200
CACHE_TTL = 300  # seconds; the token key makes a change show sooner, the TTL bounds how long the cache grows


@st.cache_resource
def sources(config: str | None) -> svc.Sources:
    """One run store connection pool and catalog per config, shared by every browser session."""
    return svc.open_sources(config)


def config_path() -> str | None:
    return os.environ.get("WAP_CONFIG") or None


def token() -> str:
    """Not cached: one cheap query per refresh, so cached reads below are keyed on what changed."""
    return svc.change_token(sources(config_path()))


# Each cached read takes `version` (the change token) as an argument: it is part of the cache key, so the key
# changes with the run store. (Streamlit leaves parameters named with a leading underscore out of the key.)


@st.cache_data(ttl=CACHE_TTL, show_spinner=False)
def overview(config: str | None, version: str) -> dict[str, Any]:
    return svc.overview(sources(config))


@st.cache_data(ttl=CACHE_TTL, show_spinner=False)
def tables(config: str | None, version: str) -> list[str]:
    return svc.list_tables(sources(config))


@st.cache_data(ttl=CACHE_TTL, show_spinner=False)
def table_detail(config: str | None, version: str, table: str) -> dict[str, Any]:
    return svc.table_detail(sources(config), table)


@st.cache_data(ttl=CACHE_TTL, show_spinner=False)
def run_detail(config: str | None, version: str, run_id: str) -> dict[str, Any]:
    return svc.run_detail(sources(config), run_id)


@st.cache_data(ttl=CACHE_TTL, show_spinner=False)
def branch_detail(config: str | None, version: str, branch: str) -> dict[str, Any]:
    return svc.branch_detail(sources(config), branch)


@st.cache_data(ttl=CACHE_TTL, show_spinner=False)
def review_queue(config: str | None, version: str) -> list[dict[str, Any]]:
    return [dict(r) for r in rq.review_queue(sources(config))]


@st.cache_data(ttl=CACHE_TTL, show_spinner=False)
def trend(config: str | None, version: str, table: str, metric: str, column: str) -> dict[str, Any]:
    return rq.trend(sources(config), table, metric, column)


@st.cache_data(ttl=CACHE_TTL, show_spinner=False)
def trend_choices(config: str | None, version: str, table: str) -> list[str]:
    return rq.trend_choices(sources(config), table)


@st.cache_resource
def decider(config: str | None) -> Any:
    """One lakehouse for every session's decisions (its Spark starts at the first)."""
    return rq.open_lakehouse(sources(config))


@st.cache_data(ttl=CACHE_TTL, show_spinner=False)
def kept_branches(config: str | None, version: str) -> list[str]:
    return svc.branch_names(sources(config))


@st.cache_data(ttl=CACHE_TTL, show_spinner=False)
def recent_runs(config: str | None, version: str) -> list[str]:
    return svc.run_choices(sources(config))


@st.cache_data(ttl=CACHE_TTL, show_spinner=False)
def runs_list(config: str | None, version: str) -> list[dict[str, Any]]:
    return svc.recent_runs(sources(config))


@st.cache_data(ttl=CACHE_TTL, show_spinner=False)
def group_detail(config: str | None, version: str, group_id: str) -> dict[str, Any] | None:
    return svc.group_detail(sources(config), group_id)


def _cell(v: Any) -> Any:
    """Numbers, text, times and None as they are; anything else (lists, dicts) as text for people
    (wapflow.service.render), so Arrow can hold it."""
    if isinstance(v, int) and abs(v) > 2**53:  # snapshot ids: a browser's numbers would round them
        return str(v)
    if isinstance(v, float):
        return rounded(v)  # 0.1667, as the CLI prints it (wapflow.display), still a number the grid sorts
    return v if v is None or isinstance(v, str | int | float | bool | datetime) else render.text(v)


def _frame(rows: list[dict[str, Any]], columns: list[str] | None = None) -> dict[str, list[Any]]:
    """Rows as columns (what st.dataframe and the charts take), every column one type where values are mixed or
    missing: then text for people, a missing value `—` (wapflow.service.render), never `None`."""
    names = columns or list(dict.fromkeys(k for r in rows for k in r))
    out = {c: [_cell(r.get(c)) for r in rows] for c in names}
    for c, values in out.items():
        if None in values or len({type(v) for v in values}) > 1:
            out[c] = [render.text(v) for v in values]
    return out


# A grid's cell, in pixels per character and around its text: a column of ids, names, statuses or times is as
# wide as its longest value (Streamlit's own width cuts `awaiting_review` and a run id with "…").
CELL_CHAR_PX, CELL_PAD_PX = 8, 28


def _numbers(values: list[Any]) -> bool:
    return bool(values) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def _grid(data: dict[str, list[Any]]) -> None:
    """A table of rows (from _frame), its id, name, status and time columns never cut; counts with thousands
    separated (12,001), ids as they are (an order id 12001), as in the CLI's tables (wapflow.display)."""
    config: dict[str, Any] = {}
    for c, values in data.items():
        width = CELL_CHAR_PX * max(len(str(v)) for v in [c, *values]) + CELL_PAD_PX if is_whole(c) else None
        if _numbers(values):
            fmt = "plain" if is_id(c) else "localized"
            config[c] = st.column_config.NumberColumn(format=fmt, width=width)
        elif width is not None:
            config[c] = st.column_config.Column(width=width)
    st.dataframe(data, hide_index=True, column_config=config)


def _word(col: Any, label: str, value: str) -> None:
    """A label over a one-word value (a status, a table name), read like st.metric's but never cut with "…":
    st.metric ends a value its column cannot hold (`awaiting_re…` at 1100 pixels); text wraps instead."""
    col.markdown(f"{label}  \n**{_md(value)}**")


def _md(text: str) -> str:
    """`text` with Markdown's marks escaped, so a name is shown as it is."""
    return "".join("\\" + ch if ch in "\\`*_{}[]<>()#+-.!|~:$" else ch for ch in text)


def _note(note: str | None) -> None:
    if note:
        st.info(note)


def show_overview(config: str | None, tok: str) -> None:
    doc = overview(config, tok)
    _note(doc["note"])
    by_status = doc["runs_by_status"]
    # A held run keeps its branch for the review: it is counted as awaiting review, not as a kept branch.
    kept = [b for b in doc["kept_branches"] if b["status"] != AWAITING_REVIEW]
    cols = st.columns(6)
    cols[0].metric("Tables", len(doc["tables"]))
    cols[1].metric("Runs", doc["runs_total"])
    cols[2].metric("Published", by_status.get("published", 0))
    cols[3].metric("Blocked", by_status.get("blocked", 0))
    cols[4].metric("Awaiting review", by_status.get(AWAITING_REVIEW, 0))
    cols[5].metric("Kept branches", len(kept), help="branches of blocked or failed runs, kept for inspection")
    if by_status.get(AWAITING_REVIEW):
        held = [r["held_since"] for r in review_queue(config, tok)]
        oldest = f", the oldest waiting {charts.waited(min(held))}" if held else ""
        st.caption(f"{by_status[AWAITING_REVIEW]} run(s) awaiting review{oldest}: approve or reject on the Review page")
    readable = [t for t in doc["tables"] if t["rows_on_main"] is not None][:6]
    if readable:
        for col, t in zip(st.columns(len(readable)), readable, strict=True):
            col.metric(f"{t['table']} rows on main", t["rows_on_main"])
    st.subheader("Tables")
    _grid(_frame(doc["tables"]))
    st.subheader("Runs per day by status")
    if doc["runs_per_day"]:
        st.altair_chart(charts.runs_per_day(doc["runs_per_day"]), width="stretch")
    else:
        st.caption("no runs yet")
    st.subheader("Files by ledger state")
    if doc["files_by_state"]:
        _grid(_frame(doc["files_by_state"]))
    else:
        st.caption("no files in the ledger (no `wap ingest` / `wap watch` yet)")
    st.subheader("Branches kept for inspection")
    if kept:
        _grid(_frame(kept))
    else:
        st.caption("none")
    st.subheader("Alerts sent")
    if doc["alerts"]:
        st.caption("the newest 50 deliveries (a failed one says why; never the URL)")
        _grid(_frame(doc["alerts"]))
    else:
        st.caption("none (alerts are configured in [alerts] of wap.toml)")


def _pick(label: str, options: list[str], key: str) -> str:
    """A choice from `options`, or a name pasted into the text box (which wins when filled)."""
    picked = st.sidebar.selectbox(label, options, key=f"{key}_pick") if options else None
    pasted = st.sidebar.text_input(f"or paste a {label.lower()}", key=key).strip()
    return pasted or (picked or "")


def show_table(config: str | None, tok: str, table: str) -> None:
    if not table:
        st.caption("no tables yet")
        return
    doc = table_detail(config, tok, table)
    st.header(table)
    _note(doc["note"])
    if doc["rows_on_main"] is not None:
        cols = st.columns(2)
        cols[0].metric("Rows on main", doc["rows_on_main"])
        cols[1].metric("Snapshots on main", len(doc["history"]))
    st.subheader("main's snapshots")
    _grid(_frame(doc["history"]))
    checks = doc["checks"]
    st.subheader("Checks over time")
    if not checks:
        st.caption("no audited runs")
    else:
        st.caption("checks per run by outcome, by the time each run started (a warned check counts as warned)")
        st.altair_chart(charts.check_outcomes(checks), width="stretch")
        if any(c["failing_rows"] for c in checks):
            st.caption("failing rows per check (a batch-level check, such as an anomaly check, counts none)")
            st.altair_chart(charts.over_time(checks, "failing_rows", "failing rows", series="check"), width="stretch")
        st.caption("rows written per run")
        runs = list({c["run_id"]: c for c in checks}.values())
        st.altair_chart(charts.over_time(runs, "rows_written", "rows written"), width="stretch")
        rates = [c for c in checks if c["null_rate"] is not None]
        if rates:
            st.caption("null rate per check (null_rate checks)")
            st.altair_chart(charts.over_time(rates, "null_rate", "null rate", series="check"), width="stretch")
        _grid(_frame(checks))
    warned = {c["run_id"] for c in checks if c.get("check_status") == "warned"}
    show_trends(config, tok, table, warned)
    st.subheader("Schema changes")
    if doc["schema_changes"]:
        _grid(_frame(doc["schema_changes"]))
    else:
        st.caption("none")


def bind_address() -> str | None:
    """Where this server listens: Streamlit's own option (what `wap dashboard --host` sets), else
    $WAP_DASHBOARD_HOST; unknown means every interface (Streamlit's default)."""
    return st.get_option("server.address") or os.environ.get("WAP_DASHBOARD_HOST") or None


def _sign_in() -> None:
    """The token form's callback: the token is checked, then cleared from the session either way."""
    name = str(st.session_state.get("login_name") or "").strip()
    given = str(st.session_state.get("login_token") or "")
    st.session_state["login_token"] = ""
    if name and rq.token_matches(given):
        st.session_state["wap_user"] = name
        st.session_state.pop("login_error", None)
    else:
        st.session_state["login_error"] = "not signed in: the token is wrong, or your name is empty"


def signed_in() -> str | None:
    """Who is deciding on a dashboard bound beyond loopback: a name, after the token was entered this session."""
    user = st.session_state.get("wap_user")
    if user:
        st.caption(f"signed in as {user}")
        return str(user)
    st.markdown("**Sign in to approve or reject** (the dashboard is reachable from the network)")
    st.text_input("Your name (recorded with your decisions)", key="login_name", max_chars=NAME_CHARS)
    st.text_input("Dashboard token ($WAP_DASHBOARD_TOKEN)", type="password", key="login_token")
    st.button("Sign in", key="login", on_click=_sign_in)
    if st.session_state.get("login_error"):
        st.error(st.session_state["login_error"])
    return None


def logged_in(provider: str, allow: list[str]) -> str | None:
    """Who is deciding with [dashboard.oidc]: the identity `st.user` holds after a login with the provider (if
    wap.toml's `allow` lets it decide), else the "Log in with <provider>" button (Streamlit's own OIDC flow,
    configured by `wap dashboard`)."""
    info = st.user.to_dict()
    if "is_logged_in" not in info:  # Streamlit has no [auth] secrets: not started by `wap dashboard`
        st.warning(
            f"approve and reject are off: wap.toml's [dashboard.oidc] asks for a login with {provider}, but this "
            "Streamlit has no login configured; start it with `wap dashboard`"
        )
        return None
    who = login.oidc_identity(info)
    if who and not login.may_decide(who, allow):
        st.error(f"logged in with {provider} as {who}, who may not approve or reject here ([dashboard.oidc] allow)")
        st.button("Log out", key="oidc_logout", on_click=st.logout)
        return None
    if who:
        st.caption(f"logged in with {provider} as {who}")
        st.button("Log out", key="oidc_logout", on_click=st.logout)
        return who
    if info.get("is_logged_in"):
        st.error(f"logged in, but {provider} gave neither a verified email nor a subject id to record decisions by")
        st.button("Log out", key="oidc_logout", on_click=st.logout)
        return None
    st.markdown(f"**Log in with {provider} to approve or reject** (decisions record who you are)")
    st.button(f"Log in with {provider}", key="oidc_login", type="primary", on_click=st.login)
    return None


def _ask(run_id: str, decision: str) -> None:
    st.session_state["confirm"] = {"run_id": run_id, "decision": decision}


def _cancel() -> None:
    st.session_state.pop("confirm", None)


def _decider(config: str | None, kind: str | None, user: str | None, run_id: str) -> str | None:
    """The `by` a decision records. OIDC: who `st.user` says now (read again at the click, never a typed name),
    if allowed; a token login or this machine: the name typed, marked as given on the dashboard; None: the OS
    user."""
    oidc = sources(config).cfg.dashboard.oidc
    if kind == "oidc":
        who = login.oidc_identity(st.user.to_dict())
        if who is None or oidc is None or not login.may_decide(who, oidc.allow):
            raise WapError("not logged in as someone who may decide: log in again to approve or reject")
        return who
    typed = user or str(st.session_state.get(f"by_{run_id}") or "").strip()
    return f"{typed} (dashboard)" if typed else None


def _decide(config: str | None, run_id: str, decision: str, kind: str | None, user: str | None) -> None:
    """The confirmation's callback: the same service call as `wap approve` / `wap reject`; the outcome is kept
    for the page to show."""
    reason = str(st.session_state.get(f"reason_{run_id}") or "").strip()
    if not reason:  # said here in the page's words (the service's error names the CLI's --reason)
        message = f"Give a reason to {decision} run {run_id}: it is recorded with the decision"
        st.session_state["review_outcome"] = {"ok": False, "run_id": run_id, "message": message}
        return
    try:
        by = _decider(config, kind, user, run_id)
        with st.spinner(f"{decision} run {run_id}: auditing and publishing can take a minute"):
            done = rq.decide(decider(config), run_id, decision, reason=reason, by=by)
        st.session_state["review_outcome"] = {"ok": done["status"] in ("published", "rejected"), **done}
        st.session_state.pop("confirm", None)
    except WapError as e:
        st.session_state["review_outcome"] = {"ok": False, "run_id": run_id, "message": str(e)}


def show_review(config: str | None, tok: str) -> None:
    st.header("Runs awaiting review")
    outcome = st.session_state.get("review_outcome")
    if outcome:
        (st.success if outcome["ok"] else st.error)(f"{outcome['run_id']}: {outcome['message']}")
    oidc = sources(config).cfg.dashboard.oidc
    allowed, kind, why = rq.writes_allowed(bind_address(), oidc=oidc is not None)
    if why:
        st.warning(why)
    rows = review_queue(config, tok)
    if not rows:
        st.caption("no run awaits review (a table's `review` setting holds runs here)")
        return
    shown = [
        {
            "table": r["table"],
            "run_id": r["run_id"],
            "multi-table run": r["group_id"] or "-",
            "waiting": charts.waited(r["held_since"]),
            "warned checks": ", ".join(r["warned_checks"]) or "-",
            "publishing would": r["diff"]["text"],
        }
        for r in rows
    ]
    _grid(_frame(shown))
    user = None
    if allowed and kind == "oidc" and oidc is not None:
        user = logged_in(oidc.provider, oidc.allow)
    elif allowed and kind == "token":
        user = signed_in()
    may = allowed and (user is not None or kind is None)
    pending = st.session_state.get("confirm") or {}
    decisions: dict[str, list[dict[str, Any]]] = {}  # a multi-table run's tables are one decision
    for r in rows:
        decisions.setdefault(r["decide_id"], []).append(r)
    for run_id, parts in decisions.items():
        with st.container(border=True):
            if parts[0]["group_id"]:
                st.markdown(
                    f"**multi-table run** `{run_id}` · {len(parts)} table(s), published together or not at all · "
                    f"waiting {charts.waited(parts[0]['held_since'])}"
                )
            for r in parts:
                _held_part(r, grouped=bool(r["group_id"]))
            if not may:
                continue
            left, right = st.columns(2)
            left.button("Approve", key=f"approve_{run_id}", on_click=_ask, args=(run_id, "approve"))
            right.button("Reject", key=f"reject_{run_id}", on_click=_ask, args=(run_id, "reject"))
            if pending.get("run_id") == run_id:
                decision = pending["decision"]
                st.text_input(f"Why {decision} run {run_id}? (required, recorded)", key=f"reason_{run_id}")
                if user is None and kind is None:
                    st.text_input(
                        "Your name (recorded; empty: the user running the dashboard)",
                        key=f"by_{run_id}",
                        max_chars=NAME_CHARS,
                    )
                ok, no = st.columns(2)
                ok.button(
                    f"Confirm {decision}",
                    key=f"confirm_{run_id}",
                    type="primary",
                    on_click=_decide,
                    args=(config, run_id, decision, kind, user),
                )
                no.button("Cancel", key=f"cancel_{run_id}", on_click=_cancel)


def _held_part(r: dict[str, Any], *, grouped: bool) -> None:
    """One held run as the queue shows it: its table, warned checks, rows and notable changes (one table of a
    multi-table run: under the run's own line)."""
    run_id = r["run_id"]
    if grouped:
        st.markdown(f"**{r['table']}** · run `{run_id}`")
    else:
        st.markdown(f"**{r['table']}** · run `{run_id}` · waiting {charts.waited(r['held_since'])}")
    st.caption(f"warned checks: {', '.join(r['warned_checks']) or 'none'}")
    rows_doc = r["diff"]["rows"] or {}
    cols = st.columns(4)
    for col, what in zip(cols, ("added", "updated", "deleted", "main_rows"), strict=True):
        col.metric("rows on main now" if what == "main_rows" else f"rows {what}", rows_doc.get(what, "-"))
    for change in r["diff"]["notable"]:
        st.markdown(f"- {change}")
    if r["diff"]["more_notable"]:
        st.caption(f"{r['diff']['more_notable']} more column change(s): wap diff {run_id}")
    for line in r["diff"]["keys"]:
        st.text(f"sample keys {line}")  # plain text: keys are data, not markdown


def show_trends(config: str | None, tok: str, table: str, warned: set[str]) -> None:
    """Row count and one chosen column metric over the last runs, each with the band its run was judged by (as its
    audit recorded it; recomputed, and said so, for runs that recorded none); the picker starts on the metrics the
    table's anomaly checks watch."""
    st.subheader("Quality trends")
    choices = trend_choices(config, tok, table)
    picked = st.selectbox("column metric", choices, key="trend_metric") if choices else None
    for metric, column in [("row_count", ""), *([tuple(picked[:-1].split("(", 1))] if picked else [])]:
        doc = trend(config, tok, table, metric, column)
        if not doc["points"]:
            st.caption(f"no history of {doc['metric']} yet")
            continue
        st.caption(f"{doc['metric']} per run by the time it ran; shaded band: {doc['band']}")
        st.altair_chart(charts.trend_chart(doc["points"], doc["metric"], warned), width="stretch")
        marked = [
            {**p, "status": charts.shown_status(p["status"], p["run_id"] in warned), "band": p["band_from"]}
            for p in doc["points"]
            if p["status"] != "published" or p["outside"]
        ]
        if marked:
            st.caption(
                "runs not simply published or outside their band; band: as judged (the band the run's audit recorded) "
                "or recomputed (the run recorded none)"
            )
            columns = ["run_at", "run_id", "status", "value", "band_low", "band_high", "band", "model", "seasonality"]
            _grid(_frame(marked, columns))


def show_run(config: str | None, tok: str, run_id: str) -> None:
    if not run_id:
        st.caption("no runs yet")
        return
    group = group_detail(config, tok, run_id)
    if group is not None:
        show_group(group)
    else:
        show_one_run(config, tok, run_id)
    st.subheader("Recent runs")
    st.caption("a multi-table run is one row, its tables and their status listed; pick or paste its id")
    _grid(_frame(runs_list(config, tok)))


def show_group(doc: dict[str, Any]) -> None:
    """A multi-table run: the whole, each table, the checks of the tables that stopped it, timings, commands."""
    name = f" {doc['name']}" if doc["name"] else ""
    st.header(f"multi-table run{name} {doc['group_id']}")
    cols = st.columns([3, 1, 2, 1])
    _word(cols[0], "Status", doc["status"])
    cols[1].metric("Tables", len(doc["tables"]))
    cols[2].metric("Rows written", doc["rows_written"] if doc["rows_written"] is not None else "-")
    cols[3].metric("Took", doc["took"] or "-")
    st.caption(
        f"its tables publish together or not at all; from {doc['source']}; started {doc['started_at']}, "
        f"finished {doc['finished_at'] or '-'}"
    )
    if doc["error"]:
        st.error(f"{doc['error'].get('step')}: {doc['error'].get('message')}")
        if doc["error"].get("hint"):
            st.caption(f"hint: {doc['error']['hint']}")
    elif doc["reason"]:
        st.warning(doc["reason"])
    st.subheader("Tables")
    _grid(_frame(doc["table_rows"]))
    for t in doc["stopped_by"]:
        failing = [c for c in t["checks"] if c.get("status") == "failed"]
        if not failing:
            continue
        st.markdown(f"**{t['table']}** stopped it (run `{t['run_id']}`)")
        shown = ["name", "status", "observed", "threshold", "failing_rows", "source"]
        _grid(_frame([{k: c.get(k) for k in shown} for c in t["checks"]], shown))
        for c in failing:
            if c.get("samples"):
                _grid(_frame(c["samples"]))
            if c.get("sql"):
                st.code(c["sql"], language="sql")
    st.subheader("Timings (seconds)")
    if doc["timing_rows"]:
        _grid(_frame(doc["timing_rows"], ["table", "step", "seconds"]))
    else:
        st.caption("none recorded")
    st.subheader("Branch and commands")
    if doc["branch"]:
        st.write(f"branch {doc['branch']} ({'kept for inspection' if doc['branch_kept'] else 'not kept'})")
    for what, command in doc["commands"].items():
        st.caption(what)
        st.code(command, language="bash")


def show_one_run(config: str | None, tok: str, run_id: str) -> None:
    doc = run_detail(config, tok, run_id)
    st.header(f"run {doc['run_id']}")
    if doc["group_id"]:
        st.info(
            f"the {doc['table']} part of multi-table run {doc['group_id']}: its tables publish together or not at "
            "all (paste its id in the picker to see every table)"
        )
    cols = st.columns([3, 4, 2])
    _word(cols[0], "Status", doc["status"])
    _word(cols[1], "Table", doc["table"])
    cols[2].metric("Rows written", doc["rows_written"] if doc["rows_written"] is not None else "-")
    if doc["error"]:
        st.error(f"{doc['error'].get('step')}: {doc['error'].get('message')}")
    st.subheader("Checks")
    shown = ["name", "status", "observed", "threshold", "failing_rows", "source"]
    _grid(_frame([{k: c.get(k) for k in shown} for c in doc["checks"]], shown))
    for c in doc["checks"]:
        if c.get("status") in ("failed", "warned", "quarantined") and (c.get("samples") or c.get("sql")):
            st.markdown(f"**{c['name']}**: {c.get('failing_rows')} failing rows")
            if c.get("samples"):
                _grid(_frame(c["samples"]))
            if c.get("sql"):
                st.code(c["sql"], language="sql")
    st.subheader("Files")
    _grid(_frame([{"file": f} for f in doc["files"]]))
    if doc["ledger_files"]:
        _grid(_frame(doc["ledger_files"]))
    st.subheader("Timings (seconds)")
    if doc["timing_rows"]:
        st.bar_chart(_frame(doc["timing_rows"]), x="step", y="seconds", sort=False)  # in step order
    st.caption(f"started {doc['started_at']}, finished {doc['finished_at'] or '-'}")
    st.subheader("Branch and commands")
    if doc["branch"]:
        st.write(f"branch {doc['branch']} ({'kept for inspection' if doc['branch_kept'] else 'not kept'})")
    else:
        st.write("no branch (the run ended before it wrote one)")
    for what, command in doc["commands"].items():
        st.caption(what)
        st.code(command, language="bash")


def show_branch(config: str | None, tok: str, branch: str) -> None:
    if not branch:
        st.caption("no branches kept for inspection")
        return
    doc = branch_detail(config, tok, branch)
    st.header(f"branch {branch}")
    for t in doc["tables"]:
        st.subheader(t["table"])
        _note(t["note"])
        cols = st.columns([2, 2, 3])
        cols[0].metric("Rows added", t["rows_added"] if t["rows_added"] is not None else "-")
        cols[1].metric("Failed checks", len(t["failed_checks"]))
        _word(cols[2], "Run status", t["status"])
        st.caption(f"left by run {t['run_id']} (see the Run page for its report and commands)")
        if t["failed_checks"]:
            shown = ["name", "observed", "threshold", "failing_rows"]
            _grid(_frame([{k: c.get(k) for k in shown} for c in t["failed_checks"]], shown))
        if t["null_counts"]:
            st.caption("nulls per column of the new rows")
            _grid(_frame(t["null_counts"]))
            st.bar_chart(_frame(t["null_counts"]), x="column", y="nulls")


def from_link() -> None:
    """A link such as ?page=Run&run_id=ID opens that page on that run (once per session; the widgets rule after)."""
    if st.session_state.get("linked"):
        return
    st.session_state["linked"] = True
    params = st.query_params
    if params.get("page") in PAGES:
        st.session_state["page"] = params["page"]
    for key in ("table", "run_id", "branch"):
        if params.get(key):
            st.session_state[key] = params[key]


def main() -> None:
    st.set_page_config(page_title="wapflow", layout="wide")
    config = config_path()
    try:
        tok = token()
    except WapError as e:
        st.error(str(e))
        return
    from_link()
    st.sidebar.title("wapflow")
    page = st.sidebar.radio("Page", PAGES, key="page")
    choice = ""
    try:  # the pickers read the catalog too: a catalog that refuses is one error line, as on the pages
        if page == "Table":
            choice = _pick("Table", tables(config, tok), "table")
        elif page == "Run":
            choice = _pick("Run id", recent_runs(config, tok), "run_id")
        elif page == "Branch":
            choice = _pick("Branch", kept_branches(config, tok), "branch")
    except WapError as e:
        st.error(str(e))
        return
    st.sidebar.caption(f"refreshes every {REFRESH_SECONDS:g} s")
    body(config, page, choice)


@st.fragment(run_every=REFRESH_SECONDS)
def body(config: str | None, page: str, choice: str) -> None:
    """The page itself: rerun on its own, with a fresh change token, so new runs appear."""
    try:
        tok = token()
        if page == "Overview":
            show_overview(config, tok)
        elif page == "Review":
            show_review(config, tok)
        elif page == "Table":
            show_table(config, tok, choice)
        elif page == "Run":
            show_run(config, tok, choice)
        else:
            show_branch(config, tok, choice)
    except WapError as e:
        st.error(str(e))


main()
