"""[models.*] in wap.toml: what loading refuses (exit 2, naming the model) and the order models run in; no JVM."""

from __future__ import annotations

import pytest

from wapflow.config import parse_config
from wapflow.config.models import model_order
from wapflow.errors import EXIT_USAGE, ConfigError


def refused(models: dict) -> str:
    with pytest.raises(ConfigError) as e:
        parse_config({"models": models})
    assert e.value.exit_code == EXIT_USAGE
    return " ".join(str(e.value).split())


def test_models_run_upstream_first_and_a_named_model_brings_its_downstream():
    cfg = parse_config(
        {
            "models": {
                "gold.daily": {"sql": "SELECT day, count(*) AS n FROM silver.trips GROUP BY day"},
                "silver.trips": {"sql": "WITH x AS (SELECT * FROM raw.trips) SELECT * FROM x WHERE fare > 0"},
                "silver.zones": {"python": "pkg.zones:build", "depends_on": ["raw.zones"]},
            }
        }
    )
    assert cfg.models["silver.trips"].inputs() == ["raw.trips"]  # the CTE is not a table
    assert model_order(cfg.models) == ["silver.trips", "gold.daily", "silver.zones"]
    assert model_order(cfg.models, ["silver.trips"]) == ["silver.trips", "gold.daily"]
    assert model_order(cfg.models, ["gold.daily"]) == ["gold.daily"]
    with pytest.raises(ConfigError, match=r'no \[models."gold.dayly"\] section \(did you mean'):
        model_order(cfg.models, ["gold.dayly"])


def test_a_cycle_is_refused_at_load_naming_it():
    text = refused({"a.x": {"sql": "SELECT * FROM a.y"}, "a.y": {"sql": "SELECT * FROM a.x"}})
    assert "the models form a cycle: a.x -> a.y -> a.x" in text


def test_sql_that_writes_is_refused_at_load():
    text = refused({"a.x": {"sql": "DELETE FROM raw.trips WHERE 1 = 1"}})
    assert "must be a single read-only query" in text and "found DELETE" in text
    assert "a model's sql is one SELECT" in text


@pytest.mark.parametrize(
    ("model", "words"),
    [
        ({"python": "pkg.mod:fn"}, "a python model names the tables it reads: depends_on"),
        ({"python": "pkg.mod.fn", "depends_on": ["a.b"]}, 'is not "package.module:function"'),
        ({"sql": "SELECT 1", "python": "p:f", "depends_on": []}, "exactly one of sql"),
        ({}, "exactly one of sql"),
    ],
)
def test_a_model_without_one_clear_body_is_refused(model, words):
    assert words in refused({"silver.trips": model})
