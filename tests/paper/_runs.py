"""Fixture runs for the artefacts' tests: ``metrics.json`` files written through the contract."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpipe_repro.metrics.contract import (
    CurvePoint,
    EnvInfo,
    EvalMetrics,
    ModelInfo,
    PipelineInfo,
    RunMetrics,
    to_json,
)

ENV = EnvInfo(
    torch="2.x",
    host="fixture-host",
    device_names=["cpu X"],
    threads_per_rank=1,
    git_commit="abc1234",
)


def pipeline(K: int = 1, M: int = 1, **kw: Any) -> PipelineInfo:
    base = dict(
        checkpoint="never", schedule="gpipe", balance=None, balance_by="parameters", replicas=1
    )
    return PipelineInfo(K=K, M=M, **{**base, **kw})


def write_run(folder: Path, **fields: Any) -> RunMetrics:
    """``folder/metrics.json`` of a run with ``fields`` (dicts for model, eval and curve points are typed here)."""
    if isinstance(fields.get("model"), dict):
        fields["model"] = ModelInfo(**fields["model"])
    if isinstance(fields.get("eval"), dict):
        fields["eval"] = EvalMetrics(**fields["eval"])
    fields["curve"] = [
        CurvePoint(**p) if isinstance(p, dict) else p for p in fields.get("curve", [])
    ]
    m = RunMetrics(**{"env": ENV, **fields})
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.json").write_text(to_json(m))
    return m
