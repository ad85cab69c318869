"""The Table 5 and Fig. 3 reports on fixture metrics.json files: rows, the paper's columns, and the
"beyond / inside the seed noise" statements computed from the numbers (report.noise)."""

from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path

import pytest

from gpipe_repro.report import fig3, table5
from gpipe_repro.report.experiments import REPORTS, experiment_report
from gpipe_repro.report.noise import Z, describe_trend, diff, stat


def test_stat_and_diff_follow_the_stated_rule():
    a, b = [1.0, 2.0, 3.0], [4.0, 4.5, 6.5]
    sa, sb = stat(a), stat(b)
    assert sa.mean == pytest.approx(statistics.mean(a)) and sa.sd == pytest.approx(
        statistics.stdev(a)
    )
    d = diff(sa, sb)
    se = math.sqrt(statistics.variance(a) / 3 + statistics.variance(b) / 3)
    assert d.delta == pytest.approx(
        statistics.mean(b) - statistics.mean(a)
    ) and d.se == pytest.approx(se)
    assert d.beyond == (abs(d.delta) > Z * se)
    assert diff(stat([1.0]), sb).beyond is None  # one seed: cannot tell
    text, verdict = describe_trend(
        [stat([1, 1.1, 0.9]), stat([5, 5.1, 4.9])], ["a", "b"], "BLEU", True
    )
    assert verdict is True and "beyond the seed noise" in text
    text, verdict = describe_trend([stat([1, 3, 2]), stat([2, 1, 3.5])], ["a", "b"], "BLEU", True)
    assert verdict is None and "inside the seed noise" in text
    _, verdict = describe_trend(
        [stat([5, 5.1, 4.9]), stat([1, 1.1, 0.9])], ["a", "b"], "BLEU", True
    )
    assert verdict is False


def _metrics(path: Path, **m) -> None:
    path.mkdir(parents=True)
    (path / "metrics.json").write_text(json.dumps(m))


def table5_sweep(root: Path, bleu_by_m: dict[int, list[float]], micro: int = 1024) -> Path:
    job = 0
    for M, bleus in bleu_by_m.items():
        for seed, b in enumerate(bleus):
            _metrics(
                root / f"{job}_K2-M{M}",
                status="ok",
                source="measured",
                batch_size=M * micro,
                seed=seed,
                steps=150,
                pipeline={"K": 2, "M": M},
                losses=[9.0, 5.0 - M / 10],
                model={
                    "name": "transformer_mt",
                    "param_count": 2_300_000,
                    "config": {"L": 2, "H": 512, "A": 4, "d": 128},
                },
                data={"corpus": "es-en"},
                optim={"lr": 0.002},
                eval={"bleu": b, "loss": 6.0 - b / 10, "bleu_signature": "nrefs:1|tok:13a"},
                env={"device_names": ["cpu X"], "threads_per_rank": 1, "torch": "2.13.0"},
            )
            job += 1
    _metrics(
        root / f"{job}_K2-M8",
        status="failed",
        source="measured",
        error="boom",
        pipeline={"K": 2, "M": 8},
    )
    return root


def test_table5_rows_carry_the_papers_row_by_batch_rank(tmp_path):
    sweep = table5_sweep(
        tmp_path / "s", {1: [1.0, 1.2, 0.8], 2: [2.0, 2.1, 1.9], 4: [4.0, 4.2, 3.8]}
    )
    paths = table5.write(sweep, tmp_path / "out")
    rows = list(csv.DictReader(paths["csv"].open()))
    for col in ("batch_tokens", "M", "seed", "bleu", "nll", "paper_bleu", "paper_nll"):
        assert col in rows[0]
    ok = [r for r in rows if r["status"] == "ok"]
    assert len(ok) == 9 and len(rows) == 10  # the failed job is a row too
    by_size = {
        int(r["batch_tokens"]): (r["paper_batch_tokens"], float(r["paper_bleu"])) for r in ok
    }
    assert by_size == {
        1024: table5.PAPER[0][:2],
        2048: table5.PAPER[1][:2],
        4096: table5.PAPER[2][:2],
    }
    md = paths["md"].read_text()
    assert "BLEU trend (better with a bigger batch): reproduced, beyond the seed noise" in md
    assert "NLL trend (better with a bigger batch): reproduced, beyond the seed noise" in md
    assert "boom" in md and paths["png"].stat().st_size > 0
    assert "2.00 ± 0.10" in md  # mean ± sd of the M=2 seeds, as computed by stat


def test_table5_says_when_the_trend_is_inside_the_noise(tmp_path):
    sweep = table5_sweep(
        tmp_path / "s", {1: [1.0, 3.0, 2.0], 2: [2.5, 1.0, 3.0], 4: [1.5, 4.0, 2.9]}
    )
    md = table5.write(sweep, tmp_path / "out")["md"].read_text()
    assert "BLEU trend (better with a bigger batch): not shown beyond the seed noise" in md


def fig3_sweep(root: Path, bleu: dict[tuple[int, int, int, bool], dict[str, list[float]]]) -> Path:
    job = 0
    langs = {
        "es": ("es-en", False, "high", 28_000),
        "ca": ("ca-en-synthetic", True, "low", 2_000),
        "gl": ("gl-en-synthetic", True, "low", 2_000),
    }
    for (L, H, A, tricks), per_lang in bleu.items():
        for seed in range(len(next(iter(per_lang.values())))):
            by = {
                lang: {
                    "bleu": v[seed],
                    "nll": 5.0,
                    "sentences": 100,
                    "corpus": langs[lang][0],
                    "synthetic": langs[lang][1],
                    "resource": langs[lang][2],
                    "train_pairs": langs[lang][3],
                }
                for lang, v in per_lang.items()
            }
            _metrics(
                root / f"{job}_K1-M1",
                status="ok",
                source="measured",
                seed=seed,
                steps=150,
                batch_size=2048,
                model={
                    "name": "transformer_mt",
                    "param_count": 1_000_000 * L + 1000 * H,
                    "config": {
                        "L": L,
                        "H": H,
                        "A": A,
                        "d": 128,
                        "ffn_init_scale": tricks,
                        "logit_clip": 20.0 if tricks else None,
                    },
                },
                eval={"bleu": 1.0, "by_language": by},
                env={"device_names": ["cpu X"]},
            )
            job += 1
    return root


def test_fig3_rows_per_language_and_claims_from_the_numbers(tmp_path):
    up = {"es": [3.0, 3.1, 2.9], "ca": [1.0, 1.1, 0.9], "gl": [1.0, 1.2, 0.8]}

    def plus(d: dict[str, list[float]], x: float, low_extra: float = 0.0) -> dict[str, list[float]]:
        return {k: [v + x + (low_extra if k != "es" else 0.0) for v in vs] for k, vs in d.items()}

    sweep = fig3_sweep(
        tmp_path / "s",
        {
            (1, 512, 4, True): up,
            (2, 512, 4, True): plus(up, 1.0, 1.0),
            (4, 512, 4, True): plus(up, 2.0, 2.0),
            (2, 256, 2, True): plus(up, 0.5),
            (2, 1024, 8, True): plus(up, 1.5),
            (4, 512, 4, False): {
                k: [v + (0.5, -0.5, 0.0)[i] for i, v in enumerate(vs)]
                for k, vs in plus(up, 2.0, 2.0).items()
            },
        },
    )
    paths = fig3.write(sweep, tmp_path / "out")
    rows = list(csv.DictReader(paths["csv"].open()))
    for col in ("model", "L", "H", "A", "params", "language", "resource", "seed", "bleu"):
        assert col in rows[0]
    assert len(rows) == 6 * 3 * 3 and {r["resource"] for r in rows} == {"high", "low"}
    assert {r["synthetic"] for r in rows if r["language"] in ("ca", "gl")} == {"True"}
    md = paths["md"].read_text()
    assert "depth ladder, low-resource BLEU rises at every step, each beyond the seed noise" in md
    assert "larger on **low**-resource" in md  # the depth gain is 4 on low vs 2 on high
    assert "deep - wide" in md and "**deep** ahead" in md
    tricks_line = next(
        line for line in md.splitlines() if line.startswith("- all languages: with - without")
    )
    assert "inside the seed noise" in tricks_line  # equal means, seed spread 0.5
    assert "Synthetic sources" in md and paths["png"].stat().st_size > 0


def test_fig3_names_a_job_without_per_language_results(tmp_path):
    sweep = tmp_path / "s"
    _metrics(
        sweep / "0_K1-M1",
        status="ok",
        source="measured",
        seed=0,
        model={"config": {"L": 2, "H": 512, "A": 4, "ffn_init_scale": True, "logit_clip": 20.0}},
        eval={"bleu": 3.0},
    )
    md = fig3.write(sweep, tmp_path / "out")["md"].read_text()
    assert "no eval.by_language" in md


def test_the_callback_finds_each_experiments_own_report():
    assert experiment_report("table5") is table5.write and experiment_report("fig3") is fig3.write
    assert experiment_report("demo") is None and experiment_report(None) is None
    assert set(REPORTS) == {"table5", "fig3"}


@pytest.mark.parametrize("extra", [[], ["train.steps=20"]])
def test_the_callback_publishes_the_experiments_own_report_only_for_the_make_target(
    tmp_path, extra
):
    from omegaconf import OmegaConf

    from gpipe_repro.report.callback import GatherCallback

    sweep = table5_sweep(tmp_path / "multirun", {1: [1.0, 1.2], 4: [2.0, 2.2]})
    cfg = OmegaConf.create(
        {
            "experiment_name": "table5",
            "logger": {"name": "none"},
            "hydra": {
                "sweep": {"dir": str(sweep)},
                "runtime": {"cwd": str(tmp_path)},
                "overrides": {"task": ["experiment=table5", *extra]},
            },
        }
    )
    GatherCallback().on_multirun_end(cfg)
    beside = sweep / "report" / "table5.md"
    assert beside.exists() and "by `gpipe-run -m experiment=table5`" in beside.read_text()
    published = tmp_path / "reports" / "table5"
    if extra:
        assert not published.exists()
    else:
        assert sorted(p.name for p in published.iterdir()) == [
            "results.csv",
            "table5.md",
            "table5.png",
        ]
        assert "paper_bleu" in (published / "results.csv").read_text().splitlines()[0]
