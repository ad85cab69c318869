"""Table 4's results as data: the fine-tuning runs read from their files, grouped over seeds, as rows.

A work folder written by ``report.table4`` holds one folder per sweep under ``jobs/`` (``job.json``:
the target, the initialisation, K, the dataset's sizes; one sub-folder per seed with the run's own
``metrics.json``). Runs are grouped by (target, init, K); an accuracy is a percentage measured on the
target's own test split, summarised as mean and sample standard deviation over seeds. The paper's rows
(GPIPE.md §7) are data here too; its datasets are not on this machine: "needs data.root".
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .jobs import read_job

__all__ = [
    "COLUMNS",
    "NEEDS_ROOT",
    "PAPER",
    "Group",
    "PaperRow",
    "Run",
    "csv_rows",
    "k_check",
    "load_runs",
    "read_json",
    "summarise",
    "versus",
]

NEEDS_ROOT = "needs data.root"


@dataclass(frozen=True)
class PaperRow:
    """A row of the paper's Table 4 (AmoebaNet-B(18, 512), ImageNet pre-training, 480x480)."""

    dataset: str
    option: str | None  # our data option that reads it from data.root, if any
    train: int
    test: int
    classes: int
    accuracy: float
    previous_best: str


PAPER: tuple[PaperRow, ...] = (
    PaperRow(
        "ImageNet-2012", None, 1_281_167, 50_000, 1000, 84.4, "83.9 (85.4 with Instagram data)"
    ),
    PaperRow("CIFAR-10", "cifar10", 50_000, 10_000, 10, 99.0, "98.5"),
    PaperRow("CIFAR-100", "cifar100", 50_000, 10_000, 100, 91.3, "89.3"),
    PaperRow("Stanford Cars", "stanford_cars", 8_144, 8_041, 196, 94.6, "94.8"),
    PaperRow("Oxford Pets", "oxford_pets", 3_680, 3_369, 37, 95.9, "93.8"),
    PaperRow("Food-101", "food101", 75_750, 25_250, 101, 93.0, "90.4"),
    PaperRow("FGVC Aircraft", "fgvc_aircraft", 6_667, 3_333, 100, 92.7, "92.9"),
    PaperRow("Birdsnap", None, 47_386, 2_443, 500, 83.6, "80.2"),
)

COLUMNS = [
    "dataset",
    "target",
    "domain",
    "train_size",
    "test_size",
    "classes",
    "init",
    "K",
    "seeds",
    "accuracy_mean",
    "accuracy_std",
    "accuracy_min",
    "accuracy_max",
    "accuracies",
    "gap_points",
    "better_on_seeds",
    "steps",
    "batch_size",
    "flip",
    "cutout",
    "failed",
    "source",
    "status",
    "paper_accuracy",
    "paper_previous_best",
    "error",
]


@dataclass
class Run:
    """One fine-tuning run, as its files describe it."""

    name: str
    target: str
    label: str
    domain: str
    dataset: str
    init: str
    K: int
    seed: int
    status: str
    accuracy: float | None  # percent
    losses: list[float | None]
    error: str | None
    train_size: int | None
    test_size: int | None
    classes: int | None
    flip: bool | None
    cutout: int | None
    steps: int | None
    batch_size: int | None
    seconds: float | None


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def load_runs(work: Path) -> list[Run]:
    """Every fine-tuning run under ``work/jobs`` (one folder per sweep, one sub-folder per seed); a
    run without a readable metrics.json is a failed run."""
    runs = []
    for folder in sorted((Path(work) / "jobs").glob("*/")):
        job = read_job(folder)
        if job is None or (job.get("meta") or {}).get("role") != "finetune":
            continue
        meta = job["meta"]
        data, ds = meta.get("data") or {}, meta.get("dataset") or {}
        n = max(len(meta.get("runs") or {}), 1)
        for seed, sub in sorted((meta.get("runs") or {}).items(), key=lambda kv: int(kv[0])):
            m = read_json(folder / sub / "metrics.json") or {}
            ev = m.get("eval") or {}
            status = m.get("status") or "failed"
            acc = ev.get("accuracy")
            error = m.get("error") or (
                None if m else job.get("error") or f"no metrics.json in {sub}"
            )
            runs.append(
                Run(
                    name=f"{job['name']}/{sub}",
                    target=meta["target"],
                    label=meta.get("label", meta["target"]),
                    domain=meta.get("domain", ""),
                    dataset=data.get("name", "?"),
                    init=meta["init"],
                    K=int(meta["K"]),
                    seed=int(seed),
                    status=status,
                    accuracy=100.0 * acc if status == "ok" and acc is not None else None,
                    losses=list(m.get("losses") or []),
                    error=error,
                    train_size=ds.get("train_size"),
                    test_size=ds.get("test_size") or ev.get("samples") or None,
                    classes=ds.get("classes"),
                    flip=data.get("flip"),
                    cutout=data.get("cutout"),
                    steps=meta.get("steps"),
                    batch_size=meta.get("batch_size"),
                    seconds=job["seconds"] / n if job.get("seconds") is not None else None,
                )
            )
    return runs


@dataclass
class Group:
    """The runs of one (target, init, K) over seeds."""

    runs: list[Run]
    accuracies: dict[int, float] = field(default_factory=dict)  # seed -> percent, ok runs only

    @property
    def first(self) -> Run:
        return self.runs[0]

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.accuracies.values()) if self.accuracies else None

    @property
    def std(self) -> float | None:
        v = list(self.accuracies.values())
        return statistics.stdev(v) if len(v) > 1 else 0.0 if v else None

    @property
    def failed(self) -> list[Run]:
        return [r for r in self.runs if r.status != "ok" or r.accuracy is None]


def summarise(runs: Sequence[Run], order: Sequence[str] = ()) -> dict[tuple[str, str, int], Group]:
    """Runs grouped by (target, init, K): targets in ``order`` (the plan's: the lead first), then any
    others by name; pretrained before scratch; K ascending."""
    rank = {t: i for i, t in enumerate(order)}
    runs = sorted(
        runs,
        key=lambda r: (
            rank.get(r.target, len(rank)),
            r.target,
            r.init != "pretrained",
            r.K,
            r.seed,
        ),
    )
    groups: dict[tuple[str, str, int], Group] = {}
    for r in runs:
        g = groups.setdefault((r.target, r.init, r.K), Group([]))
        g.runs.append(r)
        if r.status == "ok" and r.accuracy is not None:
            g.accuracies[r.seed] = r.accuracy
    return groups


def versus(pre: Group, scratch: Group) -> tuple[float | None, str]:
    """The gap in points (pretrained mean - scratch mean) and on how many paired seeds it was better."""
    if pre.mean is None or scratch.mean is None:
        return None, ""
    seeds = sorted(pre.accuracies.keys() & scratch.accuracies.keys())
    wins = sum(pre.accuracies[s] > scratch.accuracies[s] for s in seeds)
    return pre.mean - scratch.mean, f"{wins}/{len(seeds)}"


def k_check(groups: dict[tuple[str, str, int], Group]) -> list[dict[str, Any]]:
    """For each target run at K > 1: per seed, its accuracy and losses beside the K = 1 run's."""
    out = []
    for (target, init, K), g in groups.items():
        base = groups.get((target, init, 1))
        if K == 1 or base is None:
            continue
        ones = {r.seed: r for r in base.runs}
        for r in sorted(g.runs, key=lambda r: r.seed):
            b = ones.get(r.seed)
            if b is None:
                continue
            out.append(
                {
                    "target": r.label,
                    "init": init,
                    "K": K,
                    "seed": r.seed,
                    "acc_k1": b.accuracy,
                    "acc_k": r.accuracy,
                    "losses_equal": bool(r.losses) and r.losses == b.losses,
                    "steps": len(r.losses),
                }
            )
    return out


def csv_rows(groups: dict[tuple[str, str, int], Group]) -> list[dict[str, Any]]:
    rows = []
    for (target, init, K), g in groups.items():
        r = g.first
        gap, wins = None, ""
        if init == "pretrained" and (target, "scratch", K) in groups:
            gap, wins = versus(g, groups[(target, "scratch", K)])
        accs = [g.accuracies[s] for s in sorted(g.accuracies)]
        rows.append(
            {
                "dataset": r.dataset,
                "target": r.label,
                "domain": r.domain,
                "train_size": r.train_size,
                "test_size": r.test_size,
                "classes": r.classes,
                "init": init,
                "K": K,
                "seeds": len(accs),
                "accuracy_mean": _round(g.mean),
                "accuracy_std": _round(g.std),
                "accuracy_min": _round(min(accs) if accs else None),
                "accuracy_max": _round(max(accs) if accs else None),
                "accuracies": ";".join(f"{a:.2f}" for a in accs),
                "gap_points": _round(gap),
                "better_on_seeds": wins,
                "steps": r.steps,
                "batch_size": r.batch_size,
                "flip": r.flip,
                "cutout": r.cutout,
                "failed": len(g.failed),
                "source": "measured",
                "status": "ok" if not g.failed else "some runs failed",
                "paper_accuracy": None,
                "paper_previous_best": None,
                "error": g.failed[0].error if g.failed else None,
            }
        )
    for p in PAPER:
        rows.append(
            {
                **dict.fromkeys(COLUMNS),
                "dataset": p.dataset,
                "target": p.dataset,
                "domain": "the paper (ImageNet pre-training)",
                "train_size": p.train,
                "test_size": p.test,
                "classes": p.classes,
                "init": "pretrained",
                "seeds": 5,
                "source": "paper",
                "status": NEEDS_ROOT,
                "paper_accuracy": p.accuracy,
                "paper_previous_best": p.previous_best,
            }
        )
    return rows


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 4)
