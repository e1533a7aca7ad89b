"""The reference design's per-file WAP, as one short-lived process: what an S3-upload trigger (a Lambda)
runs for each landed file with PyIceberg. Used by bench_outer.py as the baseline, one process per file.

    python ref_pyiceberg_wap.py CATALOG_DB WAREHOUSE TABLE FILE [--init]

Steps: load the catalog, read the file, branch from main, append the file to the branch, count NULLs of
passenger_count on the branch (the reference's audit), fast-forward main to the branch and drop it.
`--init` creates the table and appends the file to main directly (setup, not timed).
Exit 0 published, 1 blocked (branch kept), as the reference does.
"""

from __future__ import annotations

import sys
import uuid

import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import IsNull


def main(argv: list[str]) -> int:
    db, warehouse, table, path = argv[:4]
    cat = SqlCatalog("ref", uri=f"sqlite:///{db}", warehouse=f"file://{warehouse}")
    df = pq.read_table(path)
    if "--init" in argv:
        cat.create_namespace_if_not_exists(table.split(".")[0])
        tbl = cat.create_table_if_not_exists(table, schema=df.schema)
        tbl.append(df)
        return 0
    tbl = cat.load_table(table)
    main_snap = tbl.current_snapshot()
    assert main_snap is not None, "run with --init first"
    branch = f"wap_{uuid.uuid4().hex[:12]}"
    tbl.manage_snapshots().create_branch(main_snap.snapshot_id, branch).commit()
    tbl = cat.load_table(table)
    tbl.append(df, branch=branch)
    tbl = cat.load_table(table)
    head = tbl.metadata.refs[branch].snapshot_id
    nulls = tbl.scan(snapshot_id=head, row_filter=IsNull("passenger_count"), selected_fields=("passenger_count",))
    if nulls.to_arrow().num_rows:
        return 1
    tbl.manage_snapshots().set_current_snapshot(snapshot_id=head).remove_branch(branch).commit()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
