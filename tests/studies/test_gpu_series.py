"""A committed GPU profile gives Tables 2/3 a series (``studies.gpu_series``): tested with a profile
made on this CPU in a temporary folder (no GPU figures are committed by a test)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpipe_repro.config.compose import compose
from gpipe_repro.paper.throughput_findings import label
from gpipe_repro.paper.throughput_norm import build
from gpipe_repro.runplan.costing import model_key, workload
from gpipe_repro.runplan.plan import plan_model
from gpipe_repro.sim.costs import Link
from gpipe_repro.sim.measured import MeasuredDevice, cache
from gpipe_repro.sim.measured.committed import CommittedProfile, load, measured_now, save
from gpipe_repro.sim.measured.device import DeviceModel
from gpipe_repro.studies.gpu_series import gpu_cells
from gpipe_repro.studies.published import throughput

pytestmark = pytest.mark.usefixtures("private_cache")

TINY = [
    "model=transformer_lm", "model.L=6", "model.d=16", "model.H=32", "model.A=2",
    "data=synthetic", "data.kind=tokens", "data.vocab=32", "data.seq_len=8",
    "train.batch_size=32", "pipeline.checkpoint=always", "experiment_name=tiny",
]  # fmt: skip


@pytest.fixture(scope="module")
def tiny_profile():
    """The tiny model's per-layer costs measured on this CPU at the grid's micro-batches."""
    spec = compose([*TINY, "backend=sim", "hardware=measured"], cuda_available=False)
    plan = plan_model(spec)
    cal = DeviceModel("test", Link(1e-5, 1e9), 1e-5, 1e-4, False)
    costs = MeasuredDevice("cpu", 1, calibration=cal).cost_model(
        workload(spec, plan), [1, 8, 32], 1
    )
    return spec, plan, costs


LINK = Link(5e-6, 450e9)


def _commit(tiny_profile, folder, link=LINK, key=None):
    spec, plan, costs = tiny_profile
    p = CommittedProfile(
        "tiny", key or model_key(spec, plan), cache.device_name("cpu"), 2**34, costs.profile,
        costs.overhead_s, costs.step_overhead_s, link, "a test link", measured_now("test"),
    )  # fmt: skip
    return save(p, folder / "tiny.json")


def test_no_committed_profile_no_series(tmp_path):
    assert gpu_cells(2, [TINY], tmp_path / "none") == []


def test_a_committed_profile_adds_a_labelled_series_of_the_papers_grid(tiny_profile, tmp_path):
    path = _commit(tiny_profile, tmp_path)
    assert load(path).profile.sizes == [1, 8, 32]  # it round-trips
    cells = gpu_cells(2, [TINY], tmp_path)
    grid = throughput(2, "transformer_lm")
    assert sorted((c.row.K, c.row.M) for c in cells) == sorted(grid)
    assert all(c.ok and c.row.source == "simulated" and len(c.busy) == c.row.K for c in cells)
    hw = {c.row.hardware for c in cells}
    assert hw == {f"measured on {cache.device_name('cpu')}"}
    assert label(cells[0].row).startswith("simulated from per-layer costs measured on ")
    rows = build(cells, 2)  # the table normalises the series like any other
    ref = next(r for r in rows if (r.K, r.M) == (2, 1))
    assert ref.normalized == pytest.approx(1.0) and all(r.normalized for r in rows)
    # the cells are the profile's: twice the measured costs, twice every step
    doubled = tiny_profile[2].profile
    slow = replace(
        doubled,
        costs={
            n: [
                replace(
                    c,
                    forward_s=2 * c.forward_s,
                    forward_nograd_s=2 * c.forward_nograd_s,
                    backward_s=2 * c.backward_s,
                    recompute_s=None if c.recompute_s is None else 2 * c.recompute_s,
                    update_s=2 * c.update_s,
                )
                for c in cs
            ]
            for n, cs in doubled.costs.items()
        },
    )
    _commit((*tiny_profile[:2], replace(tiny_profile[2], profile=slow)), tmp_path / "slow")
    again = {(c.row.K, c.row.M): c.row.step_s for c in gpu_cells(2, [TINY], tmp_path / "slow")}
    first = {(c.row.K, c.row.M): c.row.step_s for c in cells}
    assert all(again[k] > 1.5 * first[k] for k in first)


def test_a_profile_without_link_figures_fails_its_k2_cells_in_one_line(tiny_profile, tmp_path):
    _commit(tiny_profile, tmp_path, link=None)
    cells = gpu_cells(2, [TINY], tmp_path)
    assert cells and not any(c.ok for c in cells)
    assert all("\n" not in c.error and "K >= 2 cannot be simulated" in c.error for c in cells)


def test_a_profile_of_another_model_fails_its_cells_and_says_so(tiny_profile, tmp_path):
    _commit(tiny_profile, tmp_path, key="another model")
    cells = gpu_cells(2, [TINY], tmp_path)
    assert cells and not any(c.ok for c in cells)
    assert "measured on" in cells[0].error and "for another model" in cells[0].error
    assert replace(cells[0].row).hardware.startswith("measured on ")


def test_a_gpu_with_a_published_profile_borrows_its_link_and_another_gets_none():
    from gpipe_repro.sim.costs import Link
    from gpipe_repro.sim.hardware import load_profile
    from gpipe_repro.sim.measured.committed import borrowed_link

    link, source = borrowed_link("NVIDIA H200")  # what torch names the lent host's GPU
    assert isinstance(link, Link) and link == load_profile("h200").link
    assert link.bandwidth_Bps > 0 and source.startswith("conf/hardware/h200.yaml")
    assert borrowed_link("AMD EPYC 7B13") == (None, "none")
