"""A publisher of groups of tables without a JVM, to be SIGKILLed (tests/process/test_tables_together_kill.py).

Group k writes a few rows to branch `g<k>` of every table (PyIceberg: the branch made at main's head, one
append on it whose snapshot carries `wapflow.run-id` = `g<k>-<table's position, from 1>`), then publishes them
all with wapflow's multi-table commit (wapflow.lakehouse.group_commit.publish_group on the SQLite catalog).
Every step is idempotent, so a driver started after a kill first finishes the group the killed one was in
(the branch and the append are made only where missing; a group on main is not published again), then goes on.
Its log lines say where it is, so the test can kill it there and say where each kill landed:

    life <pid> at g<k>        started; g<k> is the first group not on main
    g<k> branch <i> / g<k> append <i> / g<k> publish / g<k> published

It refuses to go on (exit 3, a line starting TORN or LEFTOVER) when it finds some tables holding a group and
others not, or a branch of a group that is on main: states an all-or-nothing publish never leaves.

    python group_driver.py serve DB CATALOG WAREHOUSE NAMESPACE T1,T2,... LOG
        a fork server: each `start [POINT]` line read on stdin forks a driver (its output appended to LOG; with
        WAP_CRASH_AT=POINT when given) and answers `started <pid>`; `reap <pid>` waits for it and answers
        `exit <code>` (-9: SIGKILLed); `quit` ends.
        Forked from a process that imported PyIceberg and wapflow once, a restart costs milliseconds, not the
        two seconds of a fresh interpreter's imports: fifty kills fit in a minute.
    python group_driver.py run DB CATALOG WAREHOUSE NAMESPACE T1,T2,... LOG MORE
        one fresh process that finishes the group in flight, publishes MORE groups after it and exits 0.
"""

from __future__ import annotations

import os
import re
import sys
import traceback
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog

from wapflow.lakehouse.group_commit import SqlGroupCommit, publish_group
from wapflow.lakehouse.model import Snapshot
from wapflow.lakehouse.refs import RunSlice
from wapflow.sql.identifiers import TableName

RUN_ID = "wapflow.run-id"
GROUP_RUN = re.compile(r"^g(\d+)-(\d+)$")
TORN = 3


def rows_of(k: int, i: int) -> int:
    """Rows group k appends to the table at position i (from 1): 1 to 3, so counts tell groups apart."""
    return 1 + (k + i) % 3


def batch(k: int, i: int) -> pa.Table:
    n = rows_of(k, i)
    return pa.table(
        {"id": pa.array([k * 1000 + j for j in range(n)], pa.int64()), "grp": pa.array([k] * n, pa.int64())}
    )


def main_run_ids(tbl: Any) -> list[str]:
    """The run ids on main's snapshots, newest first (a snapshot without one is skipped)."""
    out = []
    snap = tbl.current_snapshot()
    while snap is not None:
        rid = (snap.summary.additional_properties if snap.summary else {}).get(RUN_ID)
        if rid:
            out.append(rid)
        snap = tbl.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
    return out


def groups_on_main(tbl: Any) -> set[int]:
    return {int(m.group(1)) for rid in main_run_ids(tbl) if (m := GROUP_RUN.match(rid))}


class Driver:
    def __init__(self, db: str, catalog: str, warehouse: str, namespace: str, tables: list[str]) -> None:
        self.cat = SqlCatalog(catalog, uri=f"sqlite:///{db}", warehouse=f"file://{warehouse}")
        self.names = [TableName.parse(f"{namespace}.{t}") for t in tables]

    def load(self, name: TableName) -> Any:
        return self.cat.load_table((*name.namespace, name.name))

    def first_unpublished(self) -> int:
        """The first group not on main: the same on every table, or exit 3 (TORN / LEFTOVER)."""
        tables = [self.load(n) for n in self.names]
        seen = {n.dotted: groups_on_main(t) for n, t in zip(self.names, tables, strict=True)}
        if len({frozenset(g) for g in seen.values()}) != 1:
            print(f"TORN: the tables hold different groups on main: {seen}", flush=True)
            raise SystemExit(TORN)
        on_main = next(iter(seen.values()))
        for n, t in zip(self.names, tables, strict=True):
            for ref in t.metadata.refs:
                if ref != "main" and ref.startswith("g") and ref[1:].isdigit() and int(ref[1:]) in on_main:
                    print(f"LEFTOVER: branch {ref} of {n} is left though its group is on main", flush=True)
                    raise SystemExit(TORN)
        return max(on_main, default=0) + 1

    def group(self, k: int) -> None:
        branch = f"g{k}"
        slices = []
        for i, name in enumerate(self.names, start=1):
            rid = f"{branch}-{i}"
            tbl = self.load(name)
            if branch not in tbl.metadata.refs:
                print(f"{branch} branch {i}", flush=True)
                tbl.manage_snapshots().create_branch(tbl.metadata.current_snapshot_id, branch).commit()
                tbl = self.load(name)
            head = tbl.snapshot_by_name(branch)
            if (head.summary.additional_properties if head.summary else {}).get(RUN_ID) != rid:
                print(f"{branch} append {i}", flush=True)
                tbl.append(batch(k, i), snapshot_properties={RUN_ID: rid}, branch=branch)
                head = self.load(name).snapshot_by_name(branch)
            summary = dict(head.summary.additional_properties)
            snap = Snapshot(
                snapshot_id=head.snapshot_id,
                parent_id=head.parent_snapshot_id,
                committed_at=datetime.fromtimestamp(head.timestamp_ms / 1000, UTC),
                operation="append",
                summary=summary,
            )
            slices.append(RunSlice(name, head.parent_snapshot_id, (snap,), {RUN_ID: rid}))
        print(f"{branch} publish", flush=True)
        publish_group(SqlGroupCommit(self.cat), branch, branch, slices)
        print(f"{branch} published", flush=True)

    def drive(self, more: int | None) -> int:
        """Groups one after the other: forever (until killed), or the one in flight and `more` after it."""
        k = self.first_unpublished()
        print(f"life {os.getpid()} at g{k}", flush=True)
        last = k + more if more is not None else k + 100_000
        while k <= last:
            self.group(k)
            k += 1
        self.first_unpublished()  # the state it leaves is checked too
        return 0


def _child(args: list[str], log: str, more: int | None) -> int:
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        return Driver(*args).drive(more)
    except SystemExit as e:
        return int(e.code or 0)
    except BaseException:  # noqa: BLE001 - printed for the test, which fails on any exit but its own kill
        traceback.print_exc()
        return 70
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def serve(args: list[str], log: str) -> None:
    for line in sys.stdin:
        cmd, *rest = line.split()
        if cmd == "start":
            pid = os.fork()
            if pid == 0:
                if rest:  # a crash point this driver kills itself at (wapflow.faults)
                    os.environ["WAP_CRASH_AT"] = rest[0]
                os._exit(_child(args, log, None))
            print(f"started {pid}", flush=True)
        elif cmd == "reap":
            _, status = os.waitpid(int(rest[0]), 0)
            print(f"exit {os.waitstatus_to_exitcode(status)}", flush=True)
        elif cmd == "quit":
            return


if __name__ == "__main__":
    mode, db, catalog, warehouse, namespace, tables, log, *extra = sys.argv[1:]
    args = [db, catalog, warehouse, namespace, tables.split(",")]
    if mode == "serve":
        serve(args, log)  # type: ignore[arg-type]
    else:
        sys.exit(_child(args, log, int(extra[0])))  # type: ignore[arg-type]
