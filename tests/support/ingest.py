"""The `source` fixture of the ingest and watch tests (a pytest plugin, see tests/conftest.py): a lakehouse with
one `[sources.trips]` on the test's landing folder, and a PyIceberg reader of its catalog."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.cli_harness import LazyReader
from wapflow.config import SourceConfig
from wapflow.lakehouse.lakehouse import Lakehouse

CHECKS = [{"check": "not_null", "column": "passenger_count"}, {"check": "unique", "columns": ["trip_id"]}]


@pytest.fixture
def source(lakehouse_factory, tmp_path: Path, landing: Path):
    def make(**src) -> tuple[Lakehouse, LazyReader]:
        lh = lakehouse_factory({"nyc.trips": {"checks": CHECKS}})
        src.setdefault("settle_seconds", 0)
        lh.config.sources["trips"] = SourceConfig(table="nyc.trips", location=str(landing), **src)
        return lh, LazyReader(tmp_path, lh.config.lakehouse.catalog_name)

    return make
