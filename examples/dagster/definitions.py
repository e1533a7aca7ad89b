"""The Dagster example's definitions: everything in defs/ (the wapflow Component of defs/lakehouse/defs.yaml).

    dagster asset materialize -f definitions.py --select '*' \
        --config-json '{"ops": {"raw_trips": {"config": {"files": ["landing/clean.parquet"]}}}}'
"""

from pathlib import Path

import dagster as dg

HERE = Path(__file__).resolve().parent
defs = dg.load_from_defs_folder(path_within_project=HERE / "defs", project_root=HERE)
