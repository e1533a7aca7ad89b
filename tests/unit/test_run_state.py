"""A run's state as JSON: what a stored state from an older wapflow reads as, and the deprecated names."""

from __future__ import annotations

import warnings

import pytest

import wapflow
from wapflow.pipeline.state import STATE_VERSION, RunState, new_state
from wapflow.storage.files import FileIdentity


def _identity(uri: str) -> dict[str, object]:
    return FileIdentity(uri=uri, size=10, version="m1").to_dict()


def test_a_version_1_state_resumes_with_its_files() -> None:
    # What wapflow at stop 26 stored for a run after prepare: the resolved files under "sources".
    v2 = new_state("nyc.trips", ["/land/a.csv"], run_id="20261124t000000_abcdef").evolve(
        files=[_identity("file:///land/a.csv")], done=["prepare"], fmt="csv"
    )
    v1 = v2.to_dict() | {"version": 1}
    v1["sources"] = v1.pop("files")
    back = RunState.from_dict(v1)
    assert back.files == [_identity("file:///land/a.csv")]
    assert back.done == ["prepare"] and back.fmt == "csv"
    assert back.to_dict()["version"] == STATE_VERSION == 2
    assert RunState.from_json(back.to_json()) == back


def test_a_state_from_a_newer_wapflow_is_refused_by_name() -> None:
    doc = new_state("nyc.trips", ["a.csv"]).to_dict() | {"version": 99}
    with pytest.raises(ValueError, match="run state version 99"):
        RunState.from_dict(doc)


def test_sources_keyword_is_the_deprecated_name_of_files() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert wapflow.start("nyc.trips", ["a.csv"]).patterns == ["a.csv"]
        assert wapflow.start("nyc.trips", files=["a.csv"]).patterns == ["a.csv"]
    with pytest.warns(DeprecationWarning, match=r"sources= is deprecated, use files="):
        state = wapflow.start("nyc.trips", sources=["b.csv"])
    assert state.patterns == ["b.csv"]
    with pytest.raises(TypeError, match="not both"):
        wapflow.start("nyc.trips", files=["a.csv"], sources=["b.csv"])
    with pytest.raises(TypeError, match="files= is required"):
        wapflow.start("nyc.trips")
