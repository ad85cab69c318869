"""report.table4_report on a fixture of result files: rows, mean ± std, gaps, K check, paper rows."""

from __future__ import annotations

import csv
import json
import random
import statistics
from pathlib import Path
from typing import Any

import pytest

from gpipe_repro.metrics.contract import EnvInfo, EvalMetrics, RunMetrics, to_json
from gpipe_repro.report.table4_report import write_report
from gpipe_repro.report.table4_results import NEEDS_ROOT, PAPER

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
        env=EnvInfo(
            torch="2.x",
            host="fixture-host",
            device_names=["Fixture CPU"],
            threads_per_rank=1,
            git_commit="abc1234",
        ),
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
                "steps": 4,
                "batch_size": 32,
                "data": {"name": data, "flip": key == "same", "cutout": 8},
                "dataset": {"train_size": train, "test_size": test, "classes": classes},
            }
            _sweep(work, f"{key}-{init}-K1", meta, runs)
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
    ours = [r for r in rows if r["source"] == "measured"]
    assert [(r["dataset"], r["init"], r["K"]) for r in ours] == [
        ("fashion_mnist", "pretrained", "1"),
        ("fashion_mnist", "pretrained", "2"),
        ("fashion_mnist", "scratch", "1"),
        ("digits_images", "pretrained", "1"),
        ("digits_images", "scratch", "1"),
    ]
    for (key, init, K), by_seed in fixture["acc"].items():
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
    assert [r["dataset"] for r in paper] == [p.dataset for p in PAPER]
    for r, p in zip(paper, PAPER):
        assert r["status"] == NEEDS_ROOT and float(r["paper_accuracy"]) == p.accuracy
        assert (int(r["train_size"]), int(r["test_size"]), int(r["classes"])) == (
            p.train,
            p.test,
            p.classes,
        )
        assert r["accuracy_mean"] == ""
    md = paths["md"].read_text()
    for p in PAPER:
        line = next(x for x in md.splitlines() if x.startswith(f"| {p.dataset} |"))
        assert NEEDS_ROOT in line and str(p.accuracy) in line


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


def test_report_only_regenerates_the_same_files(fixture, tmp_path):
    a = write_report(fixture["work"], tmp_path / "a")
    b = write_report(fixture["work"], tmp_path / "b")
    assert a["csv"].read_text() == b["csv"].read_text()
    assert a["md"].read_text() == b["md"].read_text()
