"""``make validate-hw``: anchor rows, the targets per device, what rests on a profile, the CLI end to end."""

from __future__ import annotations

import pytest

from gpipe_repro.measure.roofline_check import CPU_MODELS, CPU_SIZES, RooflineRow
from gpipe_repro.paper.__main__ import main
from gpipe_repro.paper.template import words
from gpipe_repro.paper.validate_hw.hw_rows import AnchorRow, CpuRow, anchor_rows, cpu_rows
from gpipe_repro.paper.validate_hw.profiles import DeviceSummary, devices, kinds, rests_on
from gpipe_repro.paper.validate_hw.uses import UseRow, uses
from gpipe_repro.sim.anchors import MIN_ANCHORS, TOLERANCE, AnchorResult, check
from gpipe_repro.sim.hardware import load_profile, published_names
from gpipe_repro.sim.interface import Anchor
from gpipe_repro.typed_csv import read_csv


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPIPE_CACHE", str(tmp_path / "cache"))


def _line(s: DeviceSummary) -> str:
    """A device's targets in one line, as the page words them (``templates/hw_lines.md.j2``)."""
    return words("hw_lines", "device", d=s, least=MIN_ANCHORS, tol=TOLERANCE)


def _result(
    device: str, predicted: float, use: str = "check", seq: int = 0, batch: int = 32
) -> AnchorResult:
    anchor = Anchor("resnet50", batch, seq, "half", 4, 400.0, use, source="https://example.org")
    return AnchorResult(device, anchor, 100.0, predicted)  # published: 400 / 4 devices


def test_an_anchor_over_20_percent_is_flagged_with_its_signed_error():
    rows = anchor_rows([_result("d", 119.0), _result("d", 125.0), _result("d", 79.0)])
    assert [r.within for r in rows] == [True, False, False]
    assert [round(r.error, 3) for r in rows] == [0.19, 0.25, -0.21]
    assert rows[0].published == 100.0 and rows[0].simulated == 119.0 and rows[0].role == "check"


def test_a_device_with_one_anchor_fails_its_at_least_two_line():
    rows = anchor_rows(
        [
            _result("solo", 101.0, "fit"),
            _result("pair", 100.0, "fit"),
            _result("pair", 110.0, batch=64),
            _result("off", 100.0, "fit"),
            _result("off", 130.0),
        ]
    )
    by = {s.device: s for s in devices(rows, ["bare"])}
    assert not by["solo"].met and not by["solo"].enough
    assert ">= 2: not met" in _line(by["solo"]) and "target NOT met" in _line(by["solo"])
    assert by["pair"].met and _line(by["pair"]).endswith("target met")
    assert (by["pair"].checks, by["pair"].checks_within, by["pair"].checks_new) == (1, 1, 1)
    off = by["off"]  # two anchors, one over 20%: enough, but not each within
    assert off.enough and not off.met and "1 of 2 within 20% (each: not met)" in _line(off)
    assert off.worst == pytest.approx(0.30) and (off.checks, off.checks_within) == (1, 0)
    assert off.checks_new == 0  # its check has its fit anchor's setting: it checks no new point
    assert by["bare"].anchors == 0 and not by["bare"].met  # a profile without anchors has a row


def _summary(device: str, met: bool, inputs: str) -> DeviceSummary:
    return DeviceSummary(device, 2, 2 if met else 1, 1, 1 if met else 0, 1, 0.1, inputs)


def _cpu(model: str, kind: str, errors: list[float]) -> list[CpuRow]:
    fed = "tokens" if model == "tokennet" else "image"
    return [
        CpuRow(model, fed, kind, 1, n, 1.0, 1.0 + e, e, abs(e) <= 0.2)
        for n, e in zip((2, 8), errors)
    ]


def test_a_cell_rests_on_its_roofline_unless_the_profile_and_the_layers_are_anchored():
    summaries = [_summary("good", True, "image"), _summary("bad", False, "image+tokens")]
    used = [
        UseRow("t_img", "good", "amoebanet_d", "image", 18),
        UseRow("t_tok", "good", "transformer_lm", "tokens", 6),
        UseRow("t_bad", "bad", "transformer_lm", "tokens", 6),
        UseRow("t_none", "other", "amoebanet_d", "image", 3),
    ]
    ok = kinds(_cpu("tuplenet", "PairCell", [0.1, -0.15]) + _cpu("tokennet", "Block", [0.1, 0.1]))
    verdicts = rests_on(summaries, used, ok)
    assert [v for v, _ in verdicts] == [
        True,
        False,
        False,
        False,
    ]  # "bad" is used: no line of its own
    unused = rests_on([*summaries, _summary("idle", False, "image")], used, ok)[-1]
    assert unused == (False, unused[1]) and unused[1].startswith("idle: its targets are not met")
    assert "none of good's anchors is fed tokens (image only)" in verdicts[1][1]
    assert "bad's targets are not met" in verdicts[2][1]
    assert "no published run checks other" in verdicts[3][1]
    assert all(f"{u.cells} cells on {u.hardware}" in line for u, (_, line) in zip(used, verdicts))
    # the same image cells, once this CPU's image layers miss by more than 20% at one micro-batch
    off = kinds(_cpu("tuplenet", "PairCell", [0.1, -0.5]))
    ((fine, line),) = rests_on(summaries[:1], used[:1], off)
    assert (
        not fine and "1 of 1 kinds outside 20%, median -20%, worst -50% (tuplenet PairCell)" in line
    )


def test_cpu_rows_sum_each_layer_kind_per_micro_batch():
    def pair(layer: int, kind: str, n: int, p: str, measured: float, roofline: float):
        return RooflineRow("tuplenet", layer, kind, n, p, measured, roofline, None)

    pairs = [
        pair(0, "Stem", 2, "forward", 0.6, 0.3),
        pair(0, "Stem", 2, "backward", 0.4, 0.2),  # a layer's passes are summed
        pair(1, "PairCell", 2, "forward", 1.0, 0.9),
        pair(2, "PairCell", 2, "forward", 3.0, 3.1),
        pair(1, "PairCell", 8, "forward", 2.0, 1.0),
    ]
    rows = {(r.kind, r.micro_batch): r for r in cpu_rows(pairs)}
    assert rows[("Stem", 2)].layers == 1 and rows[("Stem", 2)].measured_s == pytest.approx(1.0)
    cell = rows[("PairCell", 2)]
    assert (cell.layers, cell.measured_s, cell.roofline_s) == (2, 4.0, pytest.approx(4.0))
    assert cell.within and cell.input == "image"
    assert rows[("Stem", 2)].error == pytest.approx(-0.5) and not rows[("Stem", 2)].within
    by_kind = {k.kind: k for k in kinds(list(rows.values()))}
    assert not by_kind["PairCell"].within  # within at 2, -50% at 8


def test_uses_counts_the_cells_of_each_experiment_on_each_profile(tmp_path):
    (tmp_path / "experiment").mkdir()
    (tmp_path / "config.yaml").write_text("defaults:\n  - model: mlp\n  - hardware: measured\n")
    (tmp_path / "experiment" / "swept.yaml").write_text(
        "defaults:\n  - override /model: amoebanet_d\nexperiment_name: swept\nbackend: auto\n"
        "hydra:\n  sweeper:\n    params:\n      pipeline.K: 2,4,8\n      pipeline.M: 1,4\n"
        "      hardware: tpu_v3,measured\n"
    )
    (tmp_path / "experiment" / "fixed.yaml").write_text(
        "defaults:\n  - override /hardware: a100\nbackend: sim\n"
        "hydra:\n  sweeper:\n    params:\n      model: mlp,tokennet\n      pipeline.K: 1,2\n"
    )
    (tmp_path / "experiment" / "measured.yaml").write_text(  # engine: never simulated
        "defaults:\n  - override /hardware: tpu_v3\nbackend: engine\n"
    )
    rows = uses(tmp_path, ["tpu_v3", "a100"])
    assert rows == [
        UseRow("fixed", "a100", "mlp", "image", 2),
        UseRow("fixed", "a100", "tokennet", "tokens", 2),
        UseRow("swept", "tpu_v3", "amoebanet_d", "image", 6),
    ]


def test_the_command_reports_every_published_anchor(tmp_path, capsys):
    out = tmp_path / "hw"
    assert main(["validate-hw", "--no-cpu", "--out", str(out)]) == 0
    rows = read_csv(out / "results.csv", AnchorRow)
    names = published_names()
    expected = [r for n in names for r in check(load_profile(n))]
    assert [(r.device, r.model, r.batch) for r in rows] == [
        (e.profile, e.anchor.model, e.anchor.batch) for e in expected
    ]
    for r, e in zip(rows, expected):
        assert r.error == pytest.approx(e.error) and r.within == (abs(e.error) <= 0.2)
        assert r.error == pytest.approx(r.simulated / r.published - 1)
    summaries = read_csv(out / "devices.csv", DeviceSummary)
    assert [s.device for s in summaries] == names
    page = (out / "hw.md").read_text()
    for s in summaries:
        assert _line(s) in page and s.anchors == sum(r.device == s.device for r in rows)
    used = read_csv(out / "uses.csv", UseRow)
    assert {u.hardware for u in used} >= {"tpu_v3", "p100_pcie"}  # Tables 2 and 3
    for u in used:
        assert f"{u.experiment} ({u.model}, fed {u.input}), {u.cells} cells on {u.hardware}" in page
    assert "Not run (`--no-cpu`)" in page and not (out / "cpu.csv").exists()
    # a variant is never published
    assert main(["validate-hw", "--no-cpu", "--publish"]) == 2
    assert "--publish is for `make validate-hw` alone" in capsys.readouterr().err


def test_the_command_checks_this_cpus_roofline_per_layer_kind(tmp_path):
    out = tmp_path / "hw"
    assert main(["validate-hw", "--out", str(out)]) == 0
    rows = read_csv(out / "cpu.csv", CpuRow)
    assert {r.model for r in rows} == set(CPU_MODELS)
    assert {r.micro_batch for r in rows} == set(CPU_SIZES)
    for r in rows:
        assert r.measured_s > 0 and r.error == pytest.approx(r.roofline_s / r.measured_s - 1)
    ks = kinds(rows)
    page = (out / "hw.md").read_text()
    assert f"{sum(k.within for k in ks)} of {len(ks)} layer kinds within 20%" in page
    assert all(f"| {k.model} | {k.kind} |" in page for k in ks)
