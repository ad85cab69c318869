import dataclasses
import math

import pytest

from gpipe_repro.sim.costs import stage_costs
from gpipe_repro.sim.count import LayerCount, OpCount
from gpipe_repro.sim.hardware import (
    PROFILES_DIR,
    HardwareConfig,
    HardwareError,
    HardwareProfile,
    load_config,
    load_profile,
    profile_of,
)
from gpipe_repro.sim.roofline import RooflineCosts, pass_time
from gpipe_repro.sim.simulate import simulate

NAMES = ("tpu_v3", "p100_pcie", "v100_nvlink", "a100", "h100", "h200")


def profile(**over):
    base = dict(
        name="test",
        peak_flops_fp32=1e12,
        peak_flops_half=4e12,
        precision="fp32",
        mem_bandwidth_Bps=1e11,
        memory_bytes=2**30,
        link_latency_s=1e-5,
        link_bandwidth_Bps=1e9,
        link_hops=1,
        efficiency_curve=((0, 0.1), (1e9, 0.6), (16e9, 0.9), (128e9, 0.95)),
        overhead_s=0.0,
    )
    base.update(over)
    return HardwareProfile(**base)


def matmul_layer(flops, param_bytes=0, act_bytes=0):
    """One matmul forward (reading weights and input, writing the output), two backward."""
    fwd = OpCount(flops, param_bytes + 2 * act_bytes, param_bytes)
    bwd = OpCount(flops, param_bytes + 2 * act_bytes, param_bytes)
    return LayerCount(
        "L", 1, param_bytes // 4, param_bytes, act_bytes, act_bytes, (fwd,), (bwd, bwd)
    )


def test_every_published_profile_loads_from_its_yaml():
    # measured.yaml is not a roofline profile: it selects this device's measured costs (config.costing)
    assert sorted(p.stem for p in PROFILES_DIR.glob("*.yaml") if p.stem != "measured") == sorted(
        NAMES
    )
    for name in NAMES:
        hw = load_profile(name)
        assert hw.name == name
        assert hw == load_profile(PROFILES_DIR / f"{name}.yaml") == profile_of(load_config(name))
        assert hw.peak_flops_half >= hw.peak_flops_fp32
        assert 0 < hw.efficiency(1e6) < hw.efficiency(1e12) <= 1
    assert load_profile("p100_pcie").link_hops == 2  # no NVLink: device -> host -> device


def test_efficiency_interpolates_in_log_size_and_clamps():
    hw = profile()
    assert hw.efficiency(1e9) == pytest.approx(0.6)
    # 4 GFLOP is half way from 1 to 16 GFLOP in log size
    assert hw.efficiency(4e9) == pytest.approx(0.6 + 0.5 * 0.3)
    assert hw.efficiency(0.5e9) == pytest.approx(0.1 + 0.5 * 0.5)  # linear below the first point
    assert hw.efficiency(1e15) == pytest.approx(0.95)


def test_bigger_ops_are_more_efficient_per_flop():
    hw = profile()
    sizes = [1e6, 1e8, 1e9, 5e9, 16e9, 64e9, 256e9]
    per_flop = [hw.op_time(f) / f for f in sizes]
    assert all(a > b for a, b in zip(per_flop, per_flop[1:]))
    # through the cost model: per-sample time falls as the micro-batch grows
    rc = RooflineCosts(hw, [matmul_layer(2e8)])
    per_sample = [rc.layer_costs(n)[0].forward_s / n for n in (1, 4, 16, 64)]
    assert all(a > b for a, b in zip(per_sample, per_sample[1:]))


def test_time_falls_as_efficiency_rises():
    layer = matmul_layer(3e9)
    times = []
    for e in (0.2, 0.5, 0.9):
        hw = profile(efficiency_curve=((1.0, e),))
        times.append(RooflineCosts(hw, [layer]).layer_costs(1)[0].forward_s)
        assert times[-1] == pytest.approx(3e9 / (1e12 * e))
    assert times[0] > times[1] > times[2]


def test_every_operation_takes_the_slowest_of_compute_memory_and_launch():
    hw = profile(efficiency_curve=((1.0, 1.0),))
    assert pass_time(hw, [OpCount(1e9, 1e6)]) == pytest.approx(1e-3)  # compute-bound: 1e9 / 1e12
    assert pass_time(hw, [OpCount(1e6, 1e9)]) == pytest.approx(1e-2)  # memory-bound: 1e9 / 1e11
    # per operation, not per pass: a compute-bound and a memory-bound op add up
    both = [OpCount(1e9, 1e6), OpCount(0.0, 1e9)]
    assert pass_time(hw, both) == pytest.approx(1e-3 + 1e-2)
    slow_mem = profile(efficiency_curve=((1.0, 1.0),), mem_efficiency=0.5)
    assert pass_time(slow_mem, [OpCount(0.0, 1e9)]) == pytest.approx(2e-2)
    assert pass_time(hw, [OpCount(0.0, 1e9)], "half") == pytest.approx(0.5e-2)  # 16-bit traffic
    launch = profile(efficiency_curve=((1.0, 1.0),), op_min_s=1e-3)
    assert pass_time(launch, [OpCount(0.0, 8.0)] * 5) == pytest.approx(5e-3)  # many tiny ops
    c = RooflineCosts(hw, [matmul_layer(0.0, param_bytes=4_000_000, act_bytes=1000)]).layer_costs(
        10
    )[0]
    assert c.forward_s == pytest.approx((4_000_000 + 2 * 10_000) / 1e11)  # weights fixed, acts x10
    assert c.update_s == pytest.approx(5 * 4_000_000 / 1e11)
    assert c.out_bytes == 10_000


def test_precision_picks_the_peak_and_maps_the_curve():
    hw = profile(precision="fp32")
    # at half precision an op of f FLOPs is as efficient as one of f * 1/4 at fp32 (same duration)
    assert hw.efficiency(8e9, "half") == pytest.approx(hw.efficiency(2e9))
    assert hw.op_time(8e9, "half") == pytest.approx(8e9 / (4e12 * hw.efficiency(2e9)))


def test_two_pcie_hops_double_the_transfer_time():
    p100 = load_profile("p100_pcie")
    one_hop = dataclasses.replace(p100, link_hops=1)
    for n in (0, 1 << 20, 64 << 20):
        assert p100.link.time(n) == pytest.approx(2 * one_hop.link.time(n))
    # and in a simulated step at M = 1, where both transfers of each cut are on the critical path
    layers = [matmul_layer(1e9, act_bytes=8 << 20)] * 4
    costs = {h: RooflineCosts(dataclasses.replace(p100, link_hops=h), layers) for h in (1, 2)}
    steps = {}
    for h, rc in costs.items():
        lc = rc.layer_costs(1)
        steps[h] = simulate(
            2, 1, "gpipe", "never", stage_costs(lc, [2, 2]), rc.link, sender_busy=False
        ).step_s
    free = simulate(
        2,
        1,
        "gpipe",
        "never",
        stage_costs(costs[1].layer_costs(1), [2, 2]),
        dataclasses.replace(costs[1].link, latency_s=0.0, bandwidth_Bps=math.inf),
    ).step_s
    assert steps[2] - free == pytest.approx(2 * (steps[1] - free))


def test_bad_profiles_are_named(tmp_path):
    with pytest.raises(HardwareError, match="hardware.peak_flops_fp32=-1 is invalid"):
        profile(peak_flops_fp32=-1)
    with pytest.raises(HardwareError, match="hardware.precision='fp8' is unknown"):
        profile(precision="fp8")
    with pytest.raises(HardwareError, match="efficiency_curve"):
        profile(efficiency_curve=((1e9, 0.5), (1e8, 0.6)))
    with pytest.raises(HardwareError, match="mem_efficiency=1.5 is invalid"):
        profile(mem_efficiency=1.5)
    with pytest.raises(HardwareError, match="hardware='tpu_v9'.*allowed: a100"):
        load_profile("tpu_v9")
    with pytest.raises(HardwareError, match="measured is this device"):
        load_profile("measured")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ncolour: green\n")
    with pytest.raises(HardwareError, match="colour"):
        load_config(bad)
    bad.write_text("name: x\nlink_hops: two\n")
    with pytest.raises(HardwareError, match="link_hops"):
        load_config(bad)
    # a config missing a published field stays at its default and is refused as the device
    empty = tmp_path / "empty.yaml"
    empty.write_text("name: mine\n")
    with pytest.raises(HardwareError, match="hardware.peak_flops_fp32=0.0 is invalid"):
        load_config(empty).check()
    HardwareConfig().check()  # measured: nothing to check


def test_the_schema_and_the_profile_name_the_same_fields():
    import dataclasses as dc

    assert {f.name for f in dc.fields(HardwareProfile)} == {
        f.name for f in dc.fields(HardwareConfig)
    }
