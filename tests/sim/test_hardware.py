"""One interface for published and measured hardware, resolved once (``sim.hardware``, ``interface``)."""

from __future__ import annotations

import pytest

from gpipe_repro.config.compose import compose
from gpipe_repro.engine.pipeline import DEFAULT_LOOKAHEAD
from gpipe_repro.metrics.summary import base_metrics
from gpipe_repro.runplan.costing import workload
from gpipe_repro.runplan.plan import plan_model
from gpipe_repro.sim import HardwareConfig, PublishedDevice, resolve_hardware
from gpipe_repro.sim.measured import MeasuredDevice

SIM = [
    "model=tuplenet",
    "model.cells=2",
    "data=synthetic",
    "data.image_size=16",
    "backend=sim",
    "train.batch_size=8",
    "pipeline.M=2",
    "pipeline.K=2",
    "logger=none",
]


pytestmark = pytest.mark.usefixtures("private_cache")  # tests/conftest.py: one thread, as a rank


def test_measured_and_published_resolve_to_the_same_interface():
    measured = resolve_hardware(HardwareConfig(), "cpu")
    assert isinstance(measured, MeasuredDevice) and measured.name == "measured"
    assert measured.lookahead == DEFAULT_LOOKAHEAD  # the engine's constant, not restated
    spec = compose([*SIM, "hardware=tpu_v3"], cuda_available=False)
    tpu = resolve_hardware(spec.hardware, "cpu")
    assert (
        isinstance(tpu, PublishedDevice) and tpu.lookahead is None and tpu.profile.name == "tpu_v3"
    )
    assert tpu.memory_bytes == 16 * 2**30 and tpu.send_occupies_sender is False
    costs = tpu.cost_model(workload(spec, plan_model(spec)), [1, 2], spec.pipeline.M)
    assert len(costs.layer_costs(4)) == len(plan_model(spec).layers)
    rec = tpu.record()
    assert rec["name"] == "tpu_v3" and rec["kind"] == "published" and "anchors" not in rec
    assert set(rec["trust"]) == {"validated", "max_error", "checks", "basis"}


def test_a_measured_profile_costs_a_model_as_the_stage_runs_it():
    spec = compose(SIM, cuda_available=False)
    hw = resolve_hardware(spec.hardware, spec.device, repeats=1)
    costs = hw.cost_model(workload(spec, plan_model(spec)), [1, 2], spec.pipeline.M)
    lc = costs.layer_costs(2)
    assert all(c.forward_s > 0 and c.backward_s > 0 for c in lc)
    assert costs.recompute_overhead_s > 0 and costs.link.latency_s > 0
    rec = hw.record()
    assert rec["kind"] == "measured" and rec["trust"]["basis"].startswith("this device")


def test_a_failed_simulated_run_still_names_its_hardware():
    spec = compose([*SIM, "hardware=p100_pcie"], cuda_available=False)
    assert base_metrics(spec, "failed", "boom").hardware == {"name": "p100_pcie"}
    assert base_metrics(spec, hardware={"name": "x", "kind": "published"}).hardware["kind"] == (
        "published"
    )
    engine = compose([o for o in SIM if o != "backend=sim"], cuda_available=False)
    assert base_metrics(engine).hardware is None


def test_a_published_hardware_group_option_is_typed():
    with pytest.raises(Exception, match="hardware.link_hops=0 is invalid"):
        compose([*SIM, "hardware=tpu_v3", "hardware.link_hops=0"], cuda_available=False)
    spec = compose([*SIM, "hardware=a100"], cuda_available=False)
    assert spec.hardware.anchors and all(
        a.source.startswith("https://") for a in spec.hardware.anchors
    )
