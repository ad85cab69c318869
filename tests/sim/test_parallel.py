"""A published run's data-parallel communication as it ran (``sim.anchors.parallel``)."""

from __future__ import annotations

import dataclasses

import pytest
from test_roofline import profile

from gpipe_repro.sim.anchors import simulate_anchor
from gpipe_repro.sim.anchors.parallel import exposed_s, ring_link
from gpipe_repro.sim.costs import LayerCost
from gpipe_repro.sim.hardware import load_profile

# 4 layers of 1e8 parameters: 400 MB of fp32 gradients each; link 1 GB/s: 0.1 s per 1e8 bytes
PARAMS = [int(1e8)] * 4


def _layers(fwd_s: float, bwd_s: float) -> list[LayerCost]:
    return [LayerCost(fwd_s, fwd_s, bwd_s, 0, update_s=0.04) for _ in PARAMS]


def test_a_ring_crosses_nodes_at_the_slower_of_link_and_nics():
    hw = profile(devices_per_node=8, internode_bandwidth_Bps=2.5e8, internode_latency_s=1e-4)
    assert ring_link(hw, 8) == hw.link
    across = ring_link(hw, 16)
    assert across.bandwidth_Bps == 2.5e8 and across.latency_s == 1e-4
    with pytest.raises(ValueError, match="internode_bandwidth_Bps"):
        ring_link(profile(devices_per_node=8), 16)


def test_ddp_hides_what_the_backward_covers_and_allreduce_hides_nothing():
    hw = profile(link_latency_s=0.0)
    R = 4  # all-reduce of n bytes: 2 (R - 1) / R n / bandwidth = 0.6 s per layer's 400 MB
    long, short = _layers(0.1, 1.0), _layers(0.1, 0.01)
    after = exposed_s(long, PARAMS, hw, R, "allreduce", False)
    assert after.comm_s == pytest.approx(4 * 0.6) and after.update_s == pytest.approx(0.16)
    # overlapped: each layer's all-reduce runs under the next (earlier) layer's backward of 1 s; the
    # first layer's is left over
    assert exposed_s(long, PARAMS, hw, R, "ddp", False).comm_s == pytest.approx(0.6)
    # a short backward hides little: the four all-reduces queue one after another
    assert exposed_s(short, PARAMS, hw, R, "ddp", False).comm_s == pytest.approx(4 * 0.6 - 0.03)
    zero = exposed_s(long, PARAMS, hw, R, "zero1", False)
    assert zero.update_s == pytest.approx(0.16 / R)  # the optimiser on a 1/R shard
    assert zero.comm_s == pytest.approx(0.6 + 3 / 4 * 1.6)  # plus the fp32 parameters gathered
    assert exposed_s(long, PARAMS, hw, 1, "ddp", False).comm_s == 0.0


def test_fsdp_gathers_ahead_and_its_accumulation_pays_every_micro_step():
    hw = profile(link_latency_s=0.0)
    # compute far longer than a gather (0.15 s) or a reduce-scatter (0.3 s)
    slow = _layers(1.0, 2.0)
    one = exposed_s(slow, PARAMS, hw, 4, "fsdp", False)
    # only the first gather and the last reduce-scatter stand outside the compute
    assert one.comm_s == pytest.approx(0.15 + 0.3) and one.update_s == pytest.approx(0.04)
    assert exposed_s(slow, PARAMS, hw, 4, "fsdp", False, accumulate=3).comm_s == pytest.approx(
        3 * one.comm_s
    )
    with pytest.raises(ValueError, match="parallel='pipeline'"):
        exposed_s(slow, PARAMS, hw, 4, "pipeline", False)


def test_an_anchor_on_one_device_is_the_compute_and_more_devices_only_add_communication():
    a100 = load_profile("a100")
    (llama,) = [a for a in a100.anchors if a.model == "llama3_8b"]
    alone = simulate_anchor(a100, dataclasses.replace(llama, devices=1))
    assert alone.comm_s == 0.0
    many = simulate_anchor(a100, llama)  # FSDP over 64: sharded update, some exposed collectives
    assert many.comm_s > 0 and many.step_s != alone.step_s
    after = simulate_anchor(a100, dataclasses.replace(llama, parallel="allreduce"))
    assert after.comm_s > many.comm_s  # nothing overlapped
