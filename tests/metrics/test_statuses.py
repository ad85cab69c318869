"""A run that does not end ``ok`` still writes a metrics.json that keeps the contract: ``failed``,
``diverged`` and ``interrupted`` files from real in-process runs, each validated against the published
JSON Schema and read back with ``load_metrics``."""

from __future__ import annotations

import json
from pathlib import Path

from jsonschema import Draft202012Validator

from gpipe_repro.config.compose import compose
from gpipe_repro.metrics.contract import RunMetrics, load_metrics
from gpipe_repro.metrics.schema import json_schema
from gpipe_repro.runner import STOP, run

SMALL = [
    "model.hidden=32",
    "model.depth=2",
    "train.warmup_steps=1",
    "logger=none",
    "train.progress=false",
    "train.eval=false",
]


def _checked(folder: Path) -> RunMetrics:
    """The run's metrics.json, valid against the schema and read back into its type."""
    doc = json.loads((folder / "metrics.json").read_text())
    errors = list(Draft202012Validator(json_schema()).iter_errors(doc))
    assert not errors, [f"{list(e.absolute_path)}: {e.message}" for e in errors]
    return load_metrics(folder / "metrics.json")


def test_a_failed_run_keeps_the_contract(tmp_path):
    m = run(compose([*SMALL, "pipeline.K=5"], cuda_available=False), tmp_path)
    back = _checked(tmp_path)
    assert back.status == m.status == "failed"
    assert back.error == "pipeline.K=5 exceeds the model's 4 layers; allowed: 1..4"
    assert back.pipeline.K == 5 and back.losses == []  # what was asked; nothing ran


def test_a_diverged_run_keeps_the_contract_and_its_steps(tmp_path):
    args = [*SMALL, "train.steps=12", "optim=sgd", "optim.lr=1e6", "optim.momentum=0"]
    m = run(compose(args, cuda_available=False), tmp_path)
    back = _checked(tmp_path)
    assert back.status == m.status == "diverged" and "the loss diverged at step" in back.error
    assert 0 < len(back.losses) < 12 and back.losses == m.losses


def test_an_interrupted_run_keeps_the_contract_and_its_steps(tmp_path, monkeypatch):
    # A signal that came before the run started: the run stops after its first step.
    monkeypatch.setattr(STOP, "requested", True)
    m = run(compose([*SMALL, "train.steps=50"], cuda_available=False), tmp_path)
    back = _checked(tmp_path)
    assert back.status == m.status == "interrupted"
    assert back.error == "stopped by SIGINT/SIGTERM after step 1 of 50"
    assert len(back.losses) == len(back.step_times_s) == 1
