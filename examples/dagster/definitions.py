"""The Dagster example's definitions: the Components of wap_defs/ (wapflow's, in wap_defs/lakehouse/defs.yaml).

    dagster asset materialize -f definitions.py --select '*' \
        --config-json '{"ops": {"raw_trips": {"config": {"files": ["landing/clean.parquet"]}}}}'
"""

import importlib
import sys
from pathlib import Path

import dagster as dg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
defs = dg.load_defs(defs_root=importlib.import_module("wap_defs"), project_root=HERE)
