"""Held-out validation (#38): the split rule keeps held-out families out of every calibration step,
the held-out models run the grid, and the page reports their raw error apart, split into drift and
engine."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch

from gpipe_repro.measure import calibration
from gpipe_repro.measure.models import (
    HELD_OUT,
    MODELS,
    calibration_model,
    held_out,
    model,
)
from gpipe_repro.measure.simulator import CellRow, Settings, _grid
from gpipe_repro.paper.artefact import make
from gpipe_repro.paper.validate_sim import ARTEFACT
from gpipe_repro.paper.validate_sim.heldout import ALL, HeldOutRow, heldout_rows
from gpipe_repro.typed_csv import read_csv, write_csv


def test_two_held_out_families_and_the_calibration_models_are_apart():
    out = [n for n in MODELS if held_out(n)]
    assert len({MODELS[n].group for n in out}) >= 2 and {MODELS[n].group for n in out} <= HELD_OUT
    assert {"amoebanet", "transformer", "imbalanced"} <= {n for n in MODELS if not held_out(n)}


@pytest.mark.parametrize("settings", [Settings(), Settings.quick()], ids=["full", "quick"])
def test_no_calibration_step_runs_a_held_out_model(settings, monkeypatch):
    """The emulated call is fitted on a calibration model; the held-out models are neither emulated
    nor fitted on, and ``calibrate`` refuses one as its call model before running anything."""
    assert any(held_out(m) for m in settings.models)  # the grid holds held-out cells
    call = settings.call_model()
    assert call is not None and not held_out(call)
    assert not any(held_out(m) for m in settings.emulated_models)
    ran: list[str] = []
    monkeypatch.setattr(calibration, "device_model", lambda **kw: ran.append("device"))
    monkeypatch.setattr(calibration, "profile_model", lambda *a: ran.append("profile"))
    for name in (n for n in MODELS if held_out(n)):
        with pytest.raises(ValueError, match="held out of calibration"):
            calibration_model(name)
        with pytest.raises(ValueError, match="held out of calibration"):
            calibration.calibrate(settings, [4], [8], [4], name, lambda m: None)
        assert ran == []  # refused before anything was measured or run


def test_held_out_models_run_both_schedules_both_remat_modes_m_1_to_8():
    s = Settings()
    for name in (n for n in s.models if held_out(n)):
        cells = s.cells(name, _grid(s))
        assert {c["M"] for c in cells} == {1, 2, 4, 8}
        assert {c["schedule"] for c in cells} >= {"gpipe", "1f1b"}
        assert {c["checkpoint"] for c in cells} == {"never", "always"}
    assert {c["M"] for c in s.cells("amoebanet", _grid(s))} == set(s.Ms)  # calibration: untouched


@pytest.mark.parametrize("name", [n for n in MODELS if held_out(n)])
def test_a_held_out_model_trains_on_its_sample(name):
    vm = model(name)
    layers = vm.layers()
    x, y = vm.sample(4)
    for la in layers:
        x = la(x)
    vm.loss(x, y).backward()
    assert x.shape == (4, 10) and all(
        p.grad is not None for la in layers for p in la.parameters() if p.requires_grad
    )
    assert torch.isfinite(x).all()


def _cell(model: str, raw: float, probed: float, K: int = 2, ck: str = "never") -> CellRow:
    return CellRow(
        model=model, K=K, M=2, schedule="gpipe", checkpoint=ck, kind="real", balance="4-4",
        micro_batch=16, measured_step_s=0.1, simulated_step_s=0.1 * (1 + probed),
        rel_error=probed, measured_raw_step_s=0.1, simulated_raw_step_s=0.1 * (1 + raw),
        rel_error_raw=raw, speed=0.95,
    )  # fmt: skip


ROWS = [
    _cell("amoebanet", -0.08, -0.03),
    _cell("amoebanet", -0.06, -0.02),
    _cell("mlp", -0.04, 0.01),
    _cell("mlp", -0.03, 0.00),
    _cell("plainconv", -0.20, -0.02, ck="always"),
]


def test_held_out_cells_are_reported_apart_with_the_raw_error_split_into_drift_and_engine():
    rows = {(h.part, h.model, h.checkpoint): h for h in heldout_rows(ROWS)}
    cal, out = rows["calibration", ALL, ALL], rows["held-out", ALL, ALL]
    assert cal.cells == 2 and out.cells == 3
    assert out.raw_median_abs == pytest.approx(0.04) and out.raw_max_abs == pytest.approx(0.20)
    assert out.met is False  # max 20% > 10%
    assert cal.raw_bias == pytest.approx(-0.07) and cal.met is False  # median 7% > 5%
    # raw = drift + engine: drift = raw - probed, engine = probed (medians over the cells)
    assert cal.drift == pytest.approx(-0.045) and cal.engine == pytest.approx(-0.025)
    mlp = rows["held-out", "mlp", "never"]
    assert mlp.raw_bias == pytest.approx(-0.035) and mlp.met is True
    assert rows["held-out", "plainconv", "always"].met is False  # bias -20%


def test_the_page_reports_held_out_cells_apart(tmp_path: Path):
    write_csv(tmp_path / "validation.csv", CellRow, ROWS)
    _, written = make(ARTEFACT, tmp_path / "validation.csv", tmp_path, argparse.Namespace(), "test")
    assert tmp_path / "heldout.csv" in written
    assert len(read_csv(tmp_path / "heldout.csv", HeldOutRow)) == 2 + 3  # per set: all + groups
    md = (tmp_path / "sim.md").read_text()
    assert "calibration and held-out models apart" in md
    assert (
        "- held-out models, 3 real cells, raw: median 4.0%, max 20.0%, bias -4.0% — **not met**"
        in md
    )
    assert "plainconv K = 2 always -20.0%" in md


def test_a_grid_without_held_out_cells_renders_no_held_out_section(tmp_path: Path):
    write_csv(tmp_path / "validation.csv", CellRow, ROWS[:2])
    _, written = make(ARTEFACT, tmp_path / "validation.csv", tmp_path, argparse.Namespace(), "test")
    assert tmp_path / "heldout.csv" not in written
    assert "held-out models apart" not in (tmp_path / "sim.md").read_text()
