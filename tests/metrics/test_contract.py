"""The metrics.json contract: types, the generated JSON Schema and page, strict reading back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from gpipe_repro.config.compose import compose
from gpipe_repro.metrics.contract import RunMetrics, StageMetrics, load_metrics, to_json
from gpipe_repro.metrics.schema import json_schema, markdown
from gpipe_repro.metrics.summary import base_metrics

ROOT = Path(__file__).resolve().parents[2]


def test_published_schema_and_page_are_generated_from_the_types():
    assert json.loads((ROOT / "docs" / "metrics.schema.json").read_text()) == json_schema(), (
        "docs/metrics.schema.json is stale: python -m gpipe_repro.metrics.schema --out docs"
    )
    assert (ROOT / "docs" / "metrics.md").read_text() == markdown()


def test_a_run_before_it_runs_fits_the_schema_and_reads_back(tmp_path):
    m = base_metrics(compose(["pipeline.K=2", "pipeline.M=4"], cuda_available=False))
    m.losses = [2.3, float("nan"), 2.1]
    m.stages = [StageMetrics(stage=0, layers=3)]
    doc = json.loads(to_json(m))
    Draft202012Validator(json_schema()).validate(doc)
    assert doc["losses"] == [2.3, None, 2.1]  # not finite -> null: valid JSON
    (tmp_path / "metrics.json").write_text(to_json(m))
    back = load_metrics(tmp_path / "metrics.json")
    assert back.pipeline.K == 2 and back.stages[0].layers == 3 and back.model.name == "mlp"


def test_the_schema_rejects_what_breaks_the_contract():
    validator = Draft202012Validator(json_schema())
    Draft202012Validator.check_schema(json_schema())  # the published schema is itself valid
    doc = json.loads(to_json(RunMetrics()))
    assert not list(validator.iter_errors(doc))
    for bad, path, what in [
        ({**doc, "status": "fine"}, ["status"], "'fine' is not one of"),
        ({**doc, "extra": 1}, [], "'extra' was unexpected"),
        ({**doc, "losses": ["x"]}, ["losses", 0], "'x' is not valid"),
        ({k: v for k, v in doc.items() if k != "env"}, [], "'env' is a required property"),
        (
            {**doc, "env": {**doc["env"], "threads_per_rank": "2"}},
            ["env", "threads_per_rank"],
            "'2'",
        ),
    ]:
        errors = list(validator.iter_errors(bad))
        assert [list(e.absolute_path) for e in errors] == [path], (path, errors)
        assert what in errors[0].message, errors[0].message


def test_reading_back_rejects_unknown_keys(tmp_path):
    (tmp_path / "metrics.json").write_text(json.dumps({"status": "ok", "surprise": 1}))
    with pytest.raises(ValueError, match="unknown RunMetrics keys: surprise"):
        load_metrics(tmp_path / "metrics.json")


def test_reading_back_checks_every_value_against_its_type(tmp_path):
    """Nested types come from the type hints (no list of classes): a wrong value deep inside is
    named by its path, in one line, and so is an unknown key of a nested object."""
    doc = json.loads(to_json(RunMetrics(stages=[StageMetrics(stage=0, layers=3)])))
    doc["stages"][0]["layers"] = "many"
    doc["env"]["shell"] = "bash"
    (tmp_path / "metrics.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError) as err:
        load_metrics(tmp_path / "metrics.json")
    msg = str(err.value)
    assert "unknown RunMetrics.env keys: shell" in msg and "RunMetrics.stages.0.layers" in msg, msg
    assert "\n" not in msg


def test_a_value_that_is_not_finite_is_written_as_null_wherever_it_is():
    m = RunMetrics(losses=[1.0, float("inf")], bubble_fraction=float("nan"))
    doc = json.loads(to_json(m))
    assert doc["losses"] == [1.0, None] and doc["bubble_fraction"] is None
    Draft202012Validator(json_schema()).validate(doc)
