"""gpipe-run plan=auto (issue #19 item 2): the run's pipeline options are gpipe-plan's pick for the
same inputs, chosen once before the run; metrics.json carries the pick and its prediction beside
the measurement; options plan=auto chooses are refused beside it."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from gpipe_repro.config.compose import compose
from gpipe_repro.errors import UserError
from gpipe_repro.metrics.contract import load_metrics
from gpipe_repro.runner import run
from gpipe_repro.search.__main__ import plan

DOCS = Path(__file__).resolve().parents[2] / "docs"
# a model too big for one device under the cap: the planner must pipeline it (K = 2)
MODEL = ["model.hidden=512", "model.depth=2", "train.batch_size=16", "hardware=tpu_v3"]
RUN = ["train.steps=3", "train.warmup_steps=1", "train.progress=false", "train.eval=false"]
AUTO = ["plan=auto", "plan.devices=2", "plan.memory_gib=0.007"]


SHAPE = ("K", "M", "replicas", "schedule")


def planner_pick(tmp_path: Path, extra: list[str]) -> dict[str, object]:
    """gpipe-plan's best row for the same model, data, hardware, batch, devices and cap."""
    shown, _ = plan([*MODEL, *extra, f"plan.out={tmp_path / 'plan'}"])
    c = shown[0]
    modes = ",".join(c.checkpoint) if len(set(c.checkpoint)) > 1 else c.checkpoint[0]
    return {f: getattr(c, f) for f in SHAPE} | {
        "balance": list(c.balance),
        "checkpoint": modes,
        "step_s": c.step_s,
        "stage_bytes": list(c.stage_bytes),
    }


def as_run(m) -> dict[str, object]:
    """The same, as the run ran it (its pipeline) and recorded it (plan.auto)."""
    a = m.plan.auto
    return {f: getattr(m.pipeline, f) for f in (*SHAPE, "balance", "checkpoint")} | {
        "step_s": a.predicted_step_time_s,
        "stage_bytes": a.predicted_stage_bytes,
    }


def test_a_real_run_with_plan_auto_runs_gpipe_plan_pick_and_records_it(tmp_path):
    m = run(compose([*MODEL, *RUN, *AUTO, "logger=none"], cuda_available=False), tmp_path / "r")
    assert m is not None and m.status == "ok", m.error
    pick = planner_pick(tmp_path, ["plan.devices=2", "plan.memory_gib=0.007"])
    assert pick["K"] == 2  # the cap binds: a real pipeline ran
    written = load_metrics(tmp_path / "r" / "metrics.json")
    assert as_run(written) == pick
    a = written.plan.auto
    assert a.devices == 2 and a.memory_cap_bytes == int(0.007 * 2**30) and a.hardware == "tpu_v3"
    assert max(a.predicted_stage_bytes) <= a.memory_cap_bytes and a.candidates > 10
    assert written.plan.balance_cost.startswith("plan=auto")
    assert written.throughput is not None and len(written.losses) == 3  # measured beside it
    schema = json.loads((DOCS / "metrics.schema.json").read_text())
    jsonschema.validate(json.loads((tmp_path / "r" / "metrics.json").read_text()), schema)


def test_backend_sim_with_plan_auto_simulates_the_pick(tmp_path):
    extra = ["plan.devices=4", "plan.memory_gib=0.007"]
    spec = compose([*MODEL, *RUN, "plan=auto", *extra, "backend=sim", "logger=none"])
    m = run(spec, tmp_path / "s")
    assert m is not None and m.status == "ok" and m.source == "simulated", m.error
    assert as_run(m) == planner_pick(tmp_path, extra)
    assert m.step_time_s == pytest.approx(m.plan.auto.predicted_step_time_s, rel=1e-9)
    with pytest.raises(UserError, match=r"^plan=auto with backend=sim needs plan.devices"):
        compose([*MODEL, "plan=auto", "backend=sim"])


@pytest.mark.parametrize(
    "args, both",
    [
        (["pipeline.K=4", "plan=auto"], ("pipeline.K=4", "plan=auto")),
        (["plan=auto", "pipeline.M=1"], ("pipeline.M=1", "plan=auto")),  # even its default
        (["pipeline=1f1b", "plan=auto"], ("pipeline=1f1b", "plan=auto")),
        (["plan.mode=auto", "train.batch_mode=fit"], ("train.batch_mode=fit", "plan.mode=auto")),
    ],
)
def test_an_option_plan_auto_chooses_is_refused_beside_it(args, both):
    with pytest.raises(UserError) as err:
        compose([*MODEL, *args])
    msg = str(err.value)
    assert "\n" not in msg and all(b in msg for b in both) and "conflicts" in msg


def test_a_value_set_elsewhere_is_refused_at_validation():
    with pytest.raises(UserError, match=r"^pipeline.K=4 conflicts with plan=auto"):
        compose([*MODEL, "pipeline.K=4", "plan=auto"], check=False)  # preflight skipped
