"""The replicas' gradient all-reduce in the simulator: a ring over the link after each stage's last
backward, before its update; one replica is exactly the simulator without it."""

import json
import math

import pytest

from gpipe_repro.sim.costs import Link, StageCost
from gpipe_repro.sim.simulate import simulate


def stage(f: float, b: float, out: int = 0, update: float = 0.0) -> StageCost:
    return StageCost(forward_s=f, forward_nograd_s=f, backward_s=b, out_bytes=out, update_s=update)


def test_ring_allreduce_closed_form():
    link = Link(latency_s=0.1, bandwidth_Bps=100.0, hops=2)
    # 2(R-1) steps of nbytes/R each, every step hops x (latency + share / bandwidth)
    assert link.allreduce_s(1000, 4) == pytest.approx(2 * 3 * 2 * (0.1 + 250 / 100))
    assert link.allreduce_s(10**9, 1) == 0.0
    with pytest.raises(ValueError, match="replicas=0"):
        link.allreduce_s(1000, 0)


@pytest.mark.parametrize("R", [2, 4, 8])
def test_one_stage_pays_compute_then_allreduce_then_update(R):
    link = Link(latency_s=0.01, bandwidth_Bps=1000.0)
    F, B, U, M, nbytes = 0.3, 0.7, 0.05, 3, 4000
    r = simulate(1, M, "gpipe", "never", [stage(F, B, update=U)], link, replicas=R,
                 grad_bytes=[nbytes])  # fmt: skip
    ring = 2 * (R - 1) / R * nbytes / 1000.0 + 2 * (R - 1) * 0.01
    assert r.step_s == pytest.approx(M * (F + B) + ring + U)
    (ar,) = [e for e in r.events if e.action == "allreduce"]
    assert ar.start == pytest.approx(M * (F + B)) and ar.end - ar.start == pytest.approx(ring)


def test_each_stage_reduces_after_its_own_last_backward():
    # stage 1 finishes its backwards before stage 0: its all-reduce starts earlier, and the step
    # ends with the slower of the two reduce + update paths
    link = Link(latency_s=0.0, bandwidth_Bps=100.0)
    stages = [stage(0.1, 0.2, out=0), stage(0.1, 0.2)]
    base = simulate(2, 2, "gpipe", "never", stages, link)
    r = simulate(2, 2, "gpipe", "never", stages, link, replicas=2, grad_bytes=[100, 1000])
    ars = {e.stage: e for e in r.events if e.action == "allreduce"}
    last_bwd = {
        k: max(e.end for e in base.events if e.stage == k and e.action == "backward")
        for k in (0, 1)
    }
    for k, nbytes in ((0, 100), (1, 1000)):
        assert ars[k].start == pytest.approx(last_bwd[k])
        assert ars[k].end == pytest.approx(last_bwd[k] + link.allreduce_s(nbytes, 2))
    assert r.step_s == pytest.approx(max(ars[0].end, ars[1].end))
    assert r.step_s > base.step_s


def test_one_replica_is_bit_for_bit_the_simulator_without_allreduce():
    link = Link(latency_s=1e-4, bandwidth_Bps=1e7, send_call_s=1e-5, recv_call_s=2e-5)
    stages = [stage(0.011, 0.023, out=4096, update=0.003) for _ in range(3)] + [stage(0.02, 0.03)]
    kw = dict(sender_busy=False, step_overhead_s=0.002, lookahead=2, recompute_overhead_s=1e-3)
    for schedule, ck in (("gpipe", "always"), ("1f1b", ["never", "always", "never", "always"])):
        old = simulate(4, 6, schedule, ck, stages, link, 1e-3, **kw)  # type: ignore[arg-type]
        new = simulate(4, 6, schedule, ck, stages, link, 1e-3, replicas=1,  # type: ignore[arg-type]
                       grad_bytes=[10**9] * 4, **kw)  # fmt: skip
        assert new.step_s == old.step_s and new.stage_end_s == old.stage_end_s
        assert new.events == old.events and new.bubble_fraction == old.bubble_fraction


def test_missing_gradient_bytes_are_refused_in_one_line():
    with pytest.raises(ValueError, match="grad_bytes has 0 entries with replicas=2"):
        simulate(2, 2, "gpipe", "never", [stage(1, 1)] * 2, Link(0.0, math.inf), replicas=2)
    with pytest.raises(ValueError, match="replicas=0"):
        simulate(1, 1, "gpipe", "never", [stage(1, 1)], Link(0.0, math.inf), replicas=0)


def test_backend_sim_charges_each_stage_its_parameters_gradient_bytes(tmp_path):
    # backend=sim on tpu_v3 with 2 replicas: each stage's all-reduce is the ring over the
    # profile's link of 4 bytes (fp32 master gradients) per parameter of the stage
    from gpipe_repro.config.compose import compose
    from gpipe_repro.runner import run
    from gpipe_repro.sim import load_profile

    args = ["backend=sim", "hardware=tpu_v3", "model.hidden=1024", "pipeline.K=2", "pipeline.M=2",
            "pipeline.replicas=2", "train.batch_size=16", "train.steps=1", "logger=none"]  # fmt: skip
    m = run(compose(args, cuda_available=False), tmp_path)
    assert m is not None and m.status == "ok", m and m.error
    trace = json.loads((tmp_path / "trace.json").read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    got = {e["tid"]: e["dur"] / 1e6 for e in events if e.get("name") == "allreduce"}
    link = load_profile("tpu_v3").link
    want = {s.stage: link.allreduce_s(4 * s.param_count, 2) for s in m.stages}
    assert set(got) == {0, 1} and all(got[k] == pytest.approx(want[k]) for k in (0, 1))
