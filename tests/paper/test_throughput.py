"""Tables 2 and 3 beside the paper: per-series normalisation, the exact factor decomposition, labels."""

from __future__ import annotations

import argparse
import csv
import math
from dataclasses import replace

import pytest

from gpipe_repro.errors import UserError
from gpipe_repro.paper.artefact import make
from gpipe_repro.paper.sweep_rows import SweepRow
from gpipe_repro.paper.throughput import TABLE2, TABLE3, Cell, ThroughputRow, load
from gpipe_repro.paper.throughput_norm import build, decompose, renormalise, why
from gpipe_repro.studies.published import throughput
from gpipe_repro.typed_csv import write_csv

EXPERIMENTS = TABLE2.experiments
OFF = argparse.Namespace(
    studies="off"
)  # the simulator's studies: tests/studies/test_sensitivity.py


def _cell(
    K: int, M: int, batch: int, step: float, busy: list[float], ok: bool = True, **kw
) -> Cell:
    rec = kw.pop("recompute", [])
    row = ThroughputRow(
        2, "amoebanet_d", K, M, batch, kw.pop("batch_mode", "fixed"), batch // M, "simulated",
        "tpu_v3", kw.pop("fits", True), step, batch / step, **kw,
    )  # fmt: skip
    return Cell(row, busy, ok, "" if ok else "no batch fits", rec)


def test_normalised_throughput_is_exactly_the_product_of_its_factors():
    ref = _cell(2, 1, 64, 1.0, [0.4, 0.45])
    for c in (
        _cell(8, 32, 64, 0.3, [0.1, 0.2, 0.15, 0.12, 0.1, 0.1, 0.2, 0.11]),
        _cell(4, 4, 256, 0.9, [0.5, 0.6, 0.55, 0.4], batch_mode="fit"),
        _cell(4, 1, 64, 0.9, [0.5, 0.6, 0.55, 0.4], recompute=[0.1, 0.15, 0.1, 0.1]),
    ):
        f = decompose(c, ref)
        normalised = c.row.throughput / ref.row.throughput
        assert math.prod(f.values()) == pytest.approx(normalised)
        K, M = c.row.K, c.row.M
        assert f["bound"] == pytest.approx(K * M / (M + K - 1))  # ref K=2, M=1 gives 1
        assert f["balance"] == pytest.approx((sum(c.busy) / K / max(c.busy)) / (0.425 / 0.45))


def _explain(r: ThroughputRow, ref: ThroughputRow, f: dict, paper: float | None) -> str:
    """A cell's sentence beside the paper's ``paper``, its series normalised to the paper's cell."""
    return why(replace(r, paper_normalized=paper), ref, f, (ref.K, ref.M))


def test_the_sentence_is_read_from_the_numbers():
    ref = _cell(2, 1, 128, 1.0, [0.45, 0.45])
    c = _cell(8, 32, 128, 0.4, [0.2, 0.5, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3])
    r = c.row
    r.normalized = r.throughput / ref.row.throughput
    f = decompose(c, ref)
    text = _explain(r, ref.row, f, 3.48)
    assert text.startswith(f"ours {r.normalized:.2f} = bubble bound {f['bound']:.2f}")
    assert f"partition imbalance {f['balance']:.2f}" in text  # the slowest stage: 0.5 vs mean 0.3
    assert (
        "micro-batch 4 vs 128" in text
        and f"paper 3.48 = {3.48 / f['bound']:.0%} of the bound" in text
    )
    ref.row.normalized = 1.0
    assert (
        _explain(ref.row, ref.row, decompose(ref, ref), 1.0)
        == "the reference cell (1 by definition)"
    )
    beaten = _cell(8, 1, 128, 0.4, c.busy)
    beaten.row.normalized = 1.0
    # above the bound is a number, not a cause: no explanation the numbers cannot show
    assert "batch grew" not in _explain(beaten.row, ref.row, decompose(beaten, ref), 1.3)


def test_the_early_recompute_overlap_is_its_own_factor_and_explains_the_simulators_step():
    """A balanced GPipe step with free transfers and no overheads, simulated: the overlap factor
    alone takes it above the bubble bound, and nothing is left for 'transfers' (1.00)."""
    from gpipe_repro.sim import Link, StageCost, simulate

    def run(K: int, M: int) -> Cell:
        st = [StageCost(8 / K, 8 / K, 16 / K, 0)] * K  # one model cut in K equal cells
        res = simulate(K, M, "gpipe", "always", st, Link(0.0, 1e30), sender_busy=False)
        rec = [sum(e.end - e.start for e in res.events if e.action == "recompute" and e.stage == k)
               for k in range(K)]  # fmt: skip
        return _cell(K, M, 8 * M, res.step_s, res.busy_s, recompute=rec)

    ref, cell = run(2, 1), run(8, 1)
    f = decompose(cell, ref)
    assert f["overlap"] > 1.1 and f["transfers"] == pytest.approx(1.0)
    assert f["bound"] * f["overlap"] == pytest.approx(cell.row.throughput / ref.row.throughput)
    cell.row.normalized = cell.row.throughput / ref.row.throughput
    assert f"early-recompute overlap {f['overlap']:.2f}" in _explain(cell.row, ref.row, f, None)
    no_rec = decompose(Cell(cell.row, cell.busy, True, ""), Cell(ref.row, ref.busy, True, ""))
    assert no_rec["overlap"] == 1.0 and no_rec["transfers"] > 1.1  # what the old table folded in


def _gathered(K: int, M: int, hardware: str, mode: str, thr: float) -> SweepRow:
    step = 128 / thr
    values = dict.fromkeys(SweepRow.__dataclass_fields__)
    return SweepRow(**{
        **values,
        "job": f"{K}-{M}-{hardware}-{mode}",
        "status": "ok",
        "source": "simulated",
        "hardware": hardware,
        "model": "amoebanet_d",
        "K": K,
        "M": M,
        "batch_size": 128,
        "batch_mode": mode,
        "micro_batch": 128 // M,
        "throughput": thr,
        "step_time_s": step,
        "stage_busy_s": ";".join([str(0.8 * step)] * K),
        "fits_memory": True,
    })  # fmt: skip


def test_every_cell_is_labelled_normalised_within_its_series_and_beside_the_paper(tmp_path):
    rows = [
        _gathered(
            K, M, hw, mode, thr * (2 if hw == "measured" else 1) * (1.5 if mode == "fit" else 1)
        )
        for hw in ("tpu_v3", "measured")
        for mode in ("fixed", "fit")
        for (K, M), thr in {(2, 1): 100.0, (4, 4): 200.0, (8, 32): 500.0}.items()
    ]
    failed = _gathered(2, 4, "tpu_v3", "fixed", 1.0)
    failed.status, failed.error, failed.throughput, failed.step_time_s = (
        "failed",
        "does not fit",
        None,
        None,
    )
    (tmp_path / EXPERIMENTS[0]).mkdir()
    write_csv(tmp_path / EXPERIMENTS[0] / "results.csv", SweepRow, [*rows, failed])
    loaded = load(tmp_path, 2, EXPERIMENTS)
    assert len(loaded) == 13
    built = build(loaded, 2)
    (bad,) = [r for r in built if r.normalized is None]  # a failed cell stays, with its reason
    assert (bad.K, bad.M, bad.why) == (2, 4, "failed: does not fit")
    for r in (r for r in built if r is not bad):
        assert r.normalized == pytest.approx({(2, 1): 1.0, (4, 4): 2.0, (8, 32): 5.0}[(r.K, r.M)])
        assert r.paper_normalized == throughput(2, "amoebanet_d")[(r.K, r.M)]
        assert r.ratio == pytest.approx(r.normalized / r.paper_normalized)
    _, written = make(TABLE2, tmp_path, tmp_path / "out", OFF, "make table2")
    out = list(csv.DictReader((tmp_path / "out" / "results.csv").open()))
    assert len(out) == 13 and {
        "table", "model", "K", "M", "batch_size", "source", "hardware", "step_s", "throughput",
        "normalized", "paper_normalized",
    } <= set(out[0])  # fmt: skip
    md = (tmp_path / "out" / "table2.md").read_text()
    for label in (
        "simulated on a TPU v3 profile · fixed batch",
        "simulated on this machine's measured costs · batch adjusted to fit memory",
    ):
        assert label in md
    # the paper's design beside the paper; the fixed batch a named study below it
    assert md.index("## Studies: other batches") < md.index(
        "### Study: AmoebaNet-D(18, 256) at a fixed batch"
    )
    assert "simulated · measured" not in md and "§3" in md and "§5" not in md
    assert "| 32 | 8 | 3.48 |" in md and (tmp_path / "out" / "table2.png").stat().st_size > 0
    lines = [ln for ln in md.splitlines() if ln.startswith("| 4 | 2 | 1.07 |")]
    assert [ln.count("failed") for ln in lines] == [0, 1]  # the design's grid, the fixed batch's
    # the page again from its own CSV: the same but for the provenance line
    make(TABLE2, tmp_path / "out" / "results.csv", tmp_path / "again", argparse.Namespace(), "x")
    body = lambda p: [x for x in p.read_text().splitlines() if not x.startswith("Generated by")]  # noqa: E731
    assert body(tmp_path / "again" / "table2.md") == body(tmp_path / "out" / "table2.md")
    for name in ("results.csv", "table2.png"):
        assert (tmp_path / "again" / name).read_bytes() == (tmp_path / "out" / name).read_bytes()


def test_a_series_whose_reference_failed_is_normalised_to_its_first_cell_that_ran():
    cells = [
        _cell(2, 1, 64, 1.0, [0.4, 0.4], ok=False),
        _cell(4, 1, 64, 1.0, [0.2] * 4),
        _cell(8, 1, 64, 0.5, [0.1] * 8),
    ]
    built = build(cells, 2)
    assert [r.normalized for r in built] == [None, 1.0, 2.0]
    assert built[2].why.startswith("normalised to K=4, M=1 (K=2, M=1 did not run); ours 2.00")
    # the paper's numbers re-normalised to the same cell: 1.38 / 1.13, not 1.38
    assert built[2].paper_normalized == pytest.approx(1.38 / 1.13)
    assert built[2].ratio == pytest.approx(2.0 / (1.38 / 1.13))


def test_a_cell_whose_batch_does_not_fit_is_flagged_and_still_the_papers_normaliser():
    cells = [
        _cell(2, 1, 64, 2.0, [0.8, 0.8], fits=False),  # ran (simulated) but does not fit
        _cell(4, 1, 64, 1.0, [0.4] * 4),
        _cell(8, 1, 64, 0.5, [0.2] * 8),
    ]
    built = build(cells, 2)
    assert [r.reference for r in built] == ["K=2, M=1"] * 3
    assert [r.normalized for r in built] == [1.0, 2.0, 4.0]
    assert built[0].why.startswith("its batch does not fit the device")
    assert built[1].paper_normalized == 1.13 and built[0].paper_normalized == 1.0
    from gpipe_repro.paper.provenance import Provenance
    from gpipe_repro.paper.throughput_findings import markdown

    md = markdown(built, Provenance(3), 2, "T", {"amoebanet_d": "A"}, "K = 2, M = 1")
    assert "| 1 | 2 | 1 | 1.00 (no fit) |" in md and "normalised to K=2, M=1, the paper's" in md


def test_a_table_without_the_simulators_studies_is_never_published():
    from gpipe_repro.paper.__main__ import main

    assert TABLE2.variant(OFF) == "no_studies" and TABLE2.variant(argparse.Namespace()) is None
    assert main(["table2", "--publish", "--studies", "off"]) == 2


def test_a_table_without_results_says_what_to_run(tmp_path):
    with pytest.raises(UserError, match="gpipe-run -m experiment=table3_amoebanet"):
        make(TABLE3, tmp_path, tmp_path / "out", OFF, "make table3")


def test_a_cell_on_an_unanchored_profile_carries_validate_hws_mark_and_one_on_an_anchored_does_not(
    tmp_path, monkeypatch
):
    from gpipe_repro.paper.validate_hw.flags import MARK
    from gpipe_repro.paper.validate_hw.hw_rows import CpuRow
    from gpipe_repro.paper.validate_hw.profiles import DeviceSummary

    hw = (
        tmp_path / "hw"
    )  # a validate-hw report: "good" anchored on images, "bad" misses its targets
    hw.mkdir()
    write_csv(
        hw / "devices.csv",
        DeviceSummary,
        [
            DeviceSummary("good", 2, 2, 1, 1, 1, 0.1, "image"),
            DeviceSummary("bad", 2, 1, 1, 0, 1, 0.4, "image"),
        ],
    )
    write_csv(
        hw / "cpu.csv", CpuRow, [CpuRow("tuplenet", "image", "Cell", 1, 2, 1.0, 1.1, 0.1, True)]
    )
    rows = [
        _gathered(K, M, h, "fixed", thr)
        for h in ("good", "bad", "measured")
        for (K, M), thr in {(2, 1): 100.0, (4, 4): 200.0}.items()
    ]
    (tmp_path / EXPERIMENTS[0]).mkdir()
    write_csv(tmp_path / EXPERIMENTS[0] / "results.csv", SweepRow, rows)
    monkeypatch.setattr(TABLE2, "hw", hw)
    make(TABLE2, tmp_path, tmp_path / "out", OFF, "make table2")
    md = (tmp_path / "out" / "table2.md").read_text()
    # the summary table: columns bad, good, measured (in the order of the rows' series)
    assert f"| 4 | 4 | 1.26 | 2.00{MARK} | 1.59 | 2.00 | 1.59 | 2.00 | 1.59 |" in md
    marked = [ln for ln in md.splitlines() if ln.startswith("| 4 | 4 | 128 |")]  # per series
    assert [MARK in ln for ln in marked] == [True, False, False]  # bad, good, measured
    (note,) = [ln for ln in md.splitlines() if ln.startswith(MARK + " ")]
    assert "amoebanet_d (fed image) on bad: bad's targets are not met (worst anchor +40.0%)" in note
    assert str(hw) in note
    # without a validate-hw report nothing is judged, and the page says so
    monkeypatch.setattr(TABLE2, "hw", tmp_path / "none")
    make(TABLE2, tmp_path / "out" / "results.csv", tmp_path / "again", OFF, "x")
    again = (tmp_path / "again" / "table2.md").read_text()
    assert MARK not in again and "no `make validate-hw` report was found" in again


def test_one_normalisation_the_papers_even_where_that_cells_batch_does_not_fit():
    """#37: a series is normalised to the paper's K = 2, M = 1 wherever that cell ran, its batch
    fitting or not; rows of a CSV made under the old rule (the first cell that fits) come back
    to it exactly, and rows made under the rule stay as they are."""
    cells = [
        _cell(2, 1, 64, 2.0, [0.8, 0.8], fits=False),
        _cell(4, 1, 64, 1.6, [0.4, 0.4, 0.4, 0.4]),
        _cell(4, 4, 64, 1.0, [0.2, 0.2, 0.2, 0.2]),
    ]
    built = build(cells, 2)
    assert [r.reference for r in built] == ["K=2, M=1"] * 3
    assert built[0].normalized == 1.0 and built[0].fits_memory is False
    assert built[1].normalized == pytest.approx(2.0 / 1.6)
    # the old rule's rows: normalised to K = 4, M = 1 (the first that fits)
    old = [replace(r, reference="K=4, M=1", normalized=r.normalized / built[1].normalized,
                   bound=r.bound / built[1].bound, balance=r.balance / built[1].balance,
                   overlap=r.overlap / built[1].overlap, transfers=r.transfers / built[1].transfers,
                   efficiency=r.efficiency / built[1].efficiency) for r in built]  # fmt: skip
    again = renormalise(old)
    for a, b in zip(again, built):
        assert a.reference == b.reference and a.normalized == pytest.approx(b.normalized)
        assert a.bound == pytest.approx(b.bound) and a.why == b.why
    assert renormalise(built) == built
