"""Table 4 on a fixture of result files: rows, mean ± std, gaps, K check, paper rows, the page again."""

from __future__ import annotations

import argparse
import csv
import json
import random
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from _runs import ENV

from gpipe_repro.metrics.contract import EvalMetrics, RunMetrics, to_json
from gpipe_repro.paper.artefact import make
from gpipe_repro.paper.table4 import ARTEFACT
from gpipe_repro.paper.table4.results import NEEDS_ROOT
from gpipe_repro.studies.published import quote, rows

PAPER = rows(4)


def write_report(source: Path, out: Path | None = None) -> dict[str, Path]:
    """The report of a work folder (or re-rendered from its runs.csv), in ``out``."""
    out = out or source / "report"
    make(ARTEFACT, source, out, argparse.Namespace(), "test")
    names = {"csv": "results.csv", "md": "table4.md", "png": "table4.png", "runs": "runs.csv"}
    return {k: out / v for k, v in names.items()}


REQUIRED = [
    "dataset",
    "train_size",
    "test_size",
    "classes",
    "init",
    "K",
    "seeds",
    "accuracy_mean",
    "accuracy_std",
    "paper_accuracy",
]
SEEDS = [0, 1, 2]
TARGETS = [  # key, label, data name, sizes
    ("same", "Fashion-MNIST 5-9, 20 per class", "fashion_mnist", 100, 5000, 5),
    ("cross", "digits, 30 per class", "digits_images", 300, 297, 10),
]


def _sweep(
    work: Path,
    name: str,
    meta: dict[str, Any],
    runs: dict[int, RunMetrics | None],
    seconds: float = 12.0,
) -> None:
    folder = work / "jobs" / name
    meta = {**meta, "runs": {str(s): f"s{s}" for s in runs}}
    for seed, m in runs.items():
        (folder / f"s{seed}").mkdir(parents=True)
        if m is not None:
            (folder / f"s{seed}" / "metrics.json").write_text(to_json(m))
    (folder / "job.json").write_text(
        json.dumps(
            {
                "name": name,
                "argv": [],
                "meta": meta,
                "status": "ok",
                "seconds": seconds,
                "error": None,
            }
        )
    )


def _run(
    acc: float, losses: list[float], status: str = "ok", error: str | None = None
) -> RunMetrics:
    return RunMetrics(
        status=status,
        error=error,
        losses=losses,
        seed=0,
        eval=EvalMetrics(accuracy=acc, samples=10) if status == "ok" else None,
        env=replace(ENV, device_names=["Fixture CPU"]),
    )


@pytest.fixture
def fixture(tmp_path: Path) -> dict[str, Any]:
    """A work folder: plan.json, a pre-training, and for each target pretrained and scratch sweeps of
    three seeds (one scratch run failed), plus the first target's pretrained sweep at K = 2 (seed 1's
    losses differ from K = 1's)."""
    rng = random.Random(7)
    work = tmp_path / "work"
    pre = tmp_path / "cache" / "pretrain-k"
    pre.mkdir(parents=True)
    (pre / "metrics.json").write_text(
        to_json(
            RunMetrics(
                status="ok",
                steps=600,
                batch_size=32,
                eval=EvalMetrics(accuracy=0.8252, samples=5000),
            )
        )
    )
    (pre / "job.json").write_text(
        json.dumps(
            {
                "name": "pretrain",
                "argv": [],
                "seconds": 66.0,
                "meta": {"data": {"name": "fashion_mnist", "classes": [0, 1]}},
            }
        )
    )
    acc: dict[tuple[str, str, int], dict[int, float]] = {}
    losses: dict[tuple[str, int], list[float]] = {}
    for key, label, data, train, test, classes in TARGETS:
        for init in ("pretrained", "scratch"):
            acc[(key, init, 1)] = {s: round(rng.uniform(0.7, 0.9), 4) for s in SEEDS}
            runs: dict[int, RunMetrics | None] = {}
            for s in SEEDS:
                losses[(key + init, s)] = [rng.uniform(0, 2) for _ in range(4)]
                runs[s] = _run(acc[(key, init, 1)][s], losses[(key + init, s)])
            if key == "cross" and init == "scratch":
                runs[2] = _run(0.0, [1.0], status="failed", error="the loss diverged at step 1")
                del acc[(key, init, 1)][2]
            meta = {
                "role": "finetune",
                "target": key,
                "label": label,
                "domain": f"{key} domain",
                "init": init,
                "K": 1,
                "D": 16,
                "steps": 4,
                "batch_size": 32,
                "data": {"name": data, "flip": key == "same", "cutout": 8},
                "dataset": {"train_size": train, "test_size": test, "classes": classes},
            }
            _sweep(work, f"{key}-{init}-K1", meta, runs)
    for D, shift in ((8, -0.05), (32, 0.05)):  # the capacity ladder around the lead's D = 16
        for init in ("pretrained", "scratch"):
            lift = shift if init == "pretrained" else 0.0
            acc[(f"same-D{D}", init, 1)] = {
                s: 0.8 + lift + (0.002 if lift else 0.003) * s for s in SEEDS
            }
            runs = {s: _run(a, [1.0]) for s, a in acc[(f"same-D{D}", init, 1)].items()}
            meta = {"role": "finetune", "target": f"same-D{D}", "label": f"same, D = {D}"}
            _sweep(work, f"same-D{D}-{init}-K1", {**meta, "init": init, "K": 1, "D": D}, runs)
    k2 = {
        0: _run(acc[("same", "pretrained", 1)][0], losses[("samepretrained", 0)]),
        1: _run(acc[("same", "pretrained", 1)][1] + 0.01, [9.0]),
        2: None,
    }
    meta = json.loads((work / "jobs" / "same-pretrained-K1" / "job.json").read_text())["meta"]
    _sweep(work, "same-pretrained-K2", {**meta, "K": 2}, k2)
    plan = {
        "variant": "fixture",
        "seeds": SEEDS,
        "targets": [{"key": k} for k, *_ in TARGETS],
        "ladder": {"target": "same", "D": [8, 16, 32]},
        "pretrain": {
            "folder": str(pre),
            "save": str(pre / "saves" / "save-600"),
            "key": "k",
            "reused": True,
        },
        "recipe": {
            "model": {"name": "amoebanet_b", "L": 3, "D": 16},
            "optim": {"name": "sgd", "lr": 0.05},
            "steps": 4,
            "batch_size": 32,
            "image_size": 28,
            "cutout": 8,
            "M": 1,
            "lr_schedule": "cosine",
        },
        "cores": 2,
        "jobs": 2,
        "wall_s": 600.0,
    }
    work.mkdir(exist_ok=True)
    (work / "plan.json").write_text(json.dumps(plan))
    return {"work": work, "acc": acc}


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_rows_are_mean_and_std_over_seeds_with_the_gap(fixture):
    paths = write_report(fixture["work"])
    rows = _rows(paths["csv"])
    assert set(REQUIRED) <= set(rows[0])
    ours = [r for r in rows if r["source"] == "measured" and r["D"] == "16"]  # not the ladder
    assert [(r["dataset"], r["init"], r["K"]) for r in ours] == [
        ("fashion_mnist", "pretrained", "1"),
        ("fashion_mnist", "pretrained", "2"),
        ("fashion_mnist", "scratch", "1"),
        ("digits_images", "pretrained", "1"),
        ("digits_images", "scratch", "1"),
    ]
    for (key, init, K), by_seed in fixture["acc"].items():
        if "-D" in key:
            continue
        label = next(t[1] for t in TARGETS if t[0] == key)
        row = next(
            r for r in ours if r["target"] == label and r["init"] == init and r["K"] == str(K)
        )
        pct = [100 * a for a in by_seed.values()]
        assert float(row["accuracy_mean"]) == pytest.approx(statistics.fmean(pct), abs=1e-4)
        assert float(row["accuracy_std"]) == pytest.approx(statistics.stdev(pct), abs=1e-4)
        assert int(row["seeds"]) == len(pct)
        train, test, classes = next(t[3:] for t in TARGETS if t[0] == key)
        assert (int(row["train_size"]), int(row["test_size"]), int(row["classes"])) == (
            train,
            test,
            classes,
        )
        assert row["paper_accuracy"] == ""
        if init == "pretrained":
            scratch = [100 * a for a in fixture["acc"][(key, "scratch", 1)].values()]
            assert float(row["gap_points"]) == pytest.approx(
                statistics.fmean(pct) - statistics.fmean(scratch), abs=1e-4
            )
            paired = fixture["acc"][(key, "scratch", 1)]
            wins = sum(by_seed[s] > paired[s] for s in paired)
            assert row["better_on_seeds"] == f"{wins}/{len(paired)}"
    failed = next(r for r in ours if r["dataset"] == "digits_images" and r["init"] == "scratch")
    assert failed["failed"] == "1" and failed["error"] == "the loss diverged at step 1"


def test_paper_rows_are_listed_and_marked_needs_data_root(fixture):
    paths = write_report(fixture["work"])
    paper = [r for r in _rows(paths["csv"]) if r["source"] == "paper"]
    assert [r["dataset"] for r in paper] == PAPER
    for r, name in zip(paper, PAPER):
        q = {c: quote(4, name, c).value for c in ("train", "test", "classes", "accuracy")}
        assert r["status"] == NEEDS_ROOT and float(r["paper_accuracy"]) == q["accuracy"]
        sizes = (int(r["train_size"]), int(r["test_size"]), int(r["classes"]))
        assert sizes == (q["train"], q["test"], q["classes"])
        assert r["accuracy_mean"] == ""
    assert paper[0]["paper_previous_best"] == "83.9 (85.4 with Instagram data)"
    md = paths["md"].read_text()
    for name in PAPER:
        line = next(x for x in md.splitlines() if x.startswith(f"| {name} |"))
        assert NEEDS_ROOT in line and str(quote(4, name, "accuracy").value) in line


def test_markdown_leads_with_the_same_domain_target_and_checks_k(fixture):
    paths = write_report(fixture["work"])
    md = paths["md"].read_text()
    ours = [
        x for x in md.splitlines() if x.startswith("| Fashion-MNIST") or x.startswith("| digits")
    ]
    assert ours[0].startswith("| Fashion-MNIST 5-9, 20 per class | same domain")
    assert "Equal accuracy on 1/3 seeds" in md and "bit-equal on 1/3 seeds" in md  # seed 2: no run
    assert "save-600" in md and "82.52%" in md and "reused from the cache" in md
    assert "Fixture CPU" in md and "measured" in md
    assert paths["png"].stat().st_size > 1000


def test_fine_tuned_against_scratch_is_judged_by_the_noise_rule(fixture):
    from gpipe_repro.paper.stats import compare, sample

    md = write_report(fixture["work"])["md"].read_text()
    line = next(x for x in md.splitlines() if x.startswith("| Fashion-MNIST 5-9"))
    acc = fixture["acc"]
    pct = lambda d: sample([100 * a for a in d.values()])  # noqa: E731
    gap = compare(pct(acc[("same", "scratch", 1)]), pct(acc[("same", "pretrained", 1)]))
    assert f"| {gap.text()} | " in line and "(t = " in gap.text()


def test_the_page_is_regenerated_from_runs_csv_alone(fixture, tmp_path):
    a = write_report(fixture["work"], tmp_path / "a")
    b = write_report(a["runs"], tmp_path / "b")  # runs.csv and plan.json beside it
    for k in ("csv", "runs", "png"):
        assert a[k].read_bytes() == b[k].read_bytes(), k
    body = lambda p: [x for x in p.read_text().splitlines() if not x.startswith("Generated by")]  # noqa: E731
    assert body(a["md"]) == body(b["md"])
    assert "re-rendered from" in b["md"].read_text()


def test_the_capacity_ladder_is_shown_and_judged_by_the_rule(fixture):
    md = write_report(fixture["work"])["md"].read_text()
    part = md.split("## Capacity ladder")[1].split("\n## ")[0]
    rows = [x for x in part.splitlines() if x.startswith("| ") and x[2].isdigit()]
    assert [int(x.split("|")[1]) for x in rows] == [8, 16, 32]
    # D = 8 and 32: fine-tuned 5 points below / above scratch with a tiny spread: beyond the noise
    assert "beyond the noise" in rows[0] and "beyond the noise" in rows[2]
    assert "p < 0.001" in rows[0] and "df = " in rows[0] and "detectable" in rows[0]
    assert "Over D, fine-tuned accuracy" in part and "the gain of pre-training" in part
