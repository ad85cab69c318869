"""Table 4's rows: one per fine-tuning run (``runs.csv``), grouped over seeds (``results.csv``).

A work folder written by ``paper.table4`` holds one folder per sweep under ``jobs/`` (``job.json``:
the target, the initialisation, K, the dataset's sizes; one sub-folder per seed with the run's own
``metrics.json``, read through the contract). A ``RunRow`` holds all a page needs of a run, so the
page is regenerated from ``runs.csv`` (and ``plan.json``) alone. Runs are grouped by (target, init,
K); an accuracy is a percentage measured on the target's own test split, summarised as mean and
sample standard deviation over seeds. The paper's rows are ``studies.published``' Table 4; its datasets
are not on this machine: "needs data.root".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ...metrics.contract import EnvInfo
from ...runner.jobs import read_job
from ...studies.published import quote, rows
from ..runs import read_run
from ..stats import Comparison, Sample, compare, sample

NEEDS_ROOT = "needs data.root"
# Our data option that reads each of the paper's datasets from data.root, where there is one.
OPTIONS = {
    "CIFAR-10": "cifar10",
    "CIFAR-100": "cifar100",
    "Stanford Cars": "stanford_cars",
    "Oxford Pets": "oxford_pets",
    "Food-101": "food101",
    "FGVC Aircraft": "fgvc_aircraft",
}


@dataclass
class RunRow:
    """One fine-tuning run, as its files describe it."""

    name: str
    target: str
    label: str
    domain: str
    dataset: str
    init: str
    K: int
    seed: int
    D: int | None  # the model's width (the pre-trained size for a fine-tune)
    status: str
    accuracy: float | None  # percent
    error: str | None
    train_size: int | None
    test_size: int | None
    classes: int | None
    flip: bool | None
    cutout: int | None
    steps: int | None
    batch_size: int | None
    seconds: float | None
    loss_steps: int  # steps whose loss the run recorded
    losses_equal_k1: bool | None  # K > 1: every step's loss equal to the K = 1 run's of its seed


def load_runs(work: Path) -> tuple[list[RunRow], list[EnvInfo]]:
    """Every fine-tuning run under ``work/jobs`` (a run without a readable metrics.json is a failed
    run) and the runs' environments."""
    runs, envs, losses = [], [], {}
    for folder in sorted((Path(work) / "jobs").glob("*/")):
        job = read_job(folder)
        if job is None or (job.get("meta") or {}).get("role") != "finetune":
            continue
        meta = job["meta"]
        data, ds = meta.get("data") or {}, meta.get("dataset") or {}
        n = max(len(meta.get("runs") or {}), 1)
        for seed, sub in sorted((meta.get("runs") or {}).items(), key=lambda kv: int(kv[0])):
            found = (folder / sub / "metrics.json").exists()
            m = read_run(folder / sub)
            envs.append(m.env)
            acc = m.eval.accuracy if m.eval else None
            row = RunRow(
                name=f"{job['name']}/{sub}",
                target=meta["target"],
                label=meta.get("label", meta["target"]),
                domain=meta.get("domain", ""),
                dataset=data.get("name", "?"),
                init=meta["init"],
                K=int(meta["K"]),
                seed=int(seed),
                D=meta.get("D"),
                status=m.status,
                accuracy=100.0 * acc if m.status == "ok" and acc is not None else None,
                error=m.error if found else job.get("error") or f"no metrics.json in {sub}",
                train_size=ds.get("train_size"),
                test_size=ds.get("test_size") or (m.eval.samples if m.eval else None) or None,
                classes=ds.get("classes"),
                flip=data.get("flip"),
                cutout=data.get("cutout"),
                steps=meta.get("steps"),
                batch_size=meta.get("batch_size"),
                seconds=job["seconds"] / n if job.get("seconds") is not None else None,
                loss_steps=len(m.losses),
                losses_equal_k1=None,
            )
            losses[(row.target, row.init, row.K, row.seed)] = m.losses
            runs.append(row)
    for r in runs:
        base = losses.get((r.target, r.init, 1, r.seed))
        if r.K > 1 and base is not None:
            mine = losses[(r.target, r.init, r.K, r.seed)]
            r.losses_equal_k1 = bool(mine) and mine == base
    return runs, envs


@dataclass
class Group:
    """The runs of one (target, init, K) over seeds."""

    runs: list[RunRow]
    accuracies: dict[int, float] = field(default_factory=dict)  # seed -> percent, ok runs only

    @property
    def first(self) -> RunRow:
        return self.runs[0]

    @property
    def sample(self) -> Sample:
        return sample(list(self.accuracies.values()))

    @property
    def failed(self) -> list[RunRow]:
        return [r for r in self.runs if r.status != "ok" or r.accuracy is None]


def group(runs: Sequence[RunRow], order: Sequence[str] = ()) -> dict[tuple[str, str, int], Group]:
    """Runs grouped by (target, init, K): targets in ``order`` (the plan's: the lead first), then any
    others by name; pretrained before scratch; K ascending."""
    rank = {t: i for i, t in enumerate(order)}
    key = lambda r: (rank.get(r.target, len(rank)), r.target, r.init != "pretrained", r.K, r.seed)  # noqa: E731
    groups: dict[tuple[str, str, int], Group] = {}
    for r in sorted(runs, key=key):
        g = groups.setdefault((r.target, r.init, r.K), Group([]))
        g.runs.append(r)
        if r.status == "ok" and r.accuracy is not None:
            g.accuracies[r.seed] = r.accuracy
    return groups


def versus(pre: Group, scratch: Group) -> tuple[Comparison | None, str]:
    """Fine-tuned against scratch by the noise rule (the gap in points), and on how many paired seeds
    fine-tuned was better."""
    if not pre.accuracies or not scratch.accuracies:
        return None, ""
    seeds = sorted(pre.accuracies.keys() & scratch.accuracies.keys())
    wins = sum(pre.accuracies[s] > scratch.accuracies[s] for s in seeds)
    return compare(scratch.sample, pre.sample), f"{wins}/{len(seeds)}"


def ladder(
    groups: dict[tuple[str, str, int], Group], target: str
) -> list[tuple[int, Group, Group | None]]:
    """The capacity ladder: ``target`` and its rungs (``target-D<D>``), each as (D, fine-tuned,
    scratch) at K = 1, by D ascending; only rungs whose fine-tunes ran."""
    out = []
    for (t, init, K), g in groups.items():
        if (
            init == "pretrained"
            and K == 1
            and g.first.D
            and t in (target, f"{target}-D{g.first.D}")
        ):
            out.append((g.first.D, g, groups.get((t, "scratch", 1))))
    return sorted(out, key=lambda x: x[0])


def k_check(groups: dict[tuple[str, str, int], Group]) -> list[tuple[RunRow, float | None]]:
    """Every run at K > 1 with a K = 1 run of the same target, init and seed, and that run's accuracy."""
    out = []
    for (target, init, K), g in groups.items():
        base = groups.get((target, init, 1))
        if K > 1 and base is not None:
            ones = {r.seed: r.accuracy for r in base.runs}
            out += [(r, ones[r.seed]) for r in g.runs if r.losses_equal_k1 is not None]
    return out


@dataclass
class GroupRow:
    """A row of ``results.csv``: one (target, init, K) over seeds, or one of the paper's datasets."""

    dataset: str
    target: str | None = None
    domain: str | None = None
    train_size: int | None = None
    test_size: int | None = None
    classes: int | None = None
    init: str | None = None
    K: int | None = None
    D: int | None = None
    seeds: int | None = None
    accuracy_mean: float | None = None
    accuracy_std: float | None = None
    accuracy_min: float | None = None
    accuracy_max: float | None = None
    accuracies: str | None = None
    gap_points: float | None = None
    better_on_seeds: str | None = None
    steps: int | None = None
    batch_size: int | None = None
    flip: bool | None = None
    cutout: int | None = None
    failed: int | None = None
    source: str | None = None
    status: str | None = None
    paper_accuracy: float | None = None
    paper_previous_best: str | None = None
    error: str | None = None


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 4)


def group_rows(groups: dict[tuple[str, str, int], Group]) -> list[GroupRow]:
    """One row per (target, init, K) over seeds, then one per dataset of the paper's table."""
    out = []
    for (target, init, K), g in groups.items():
        r, accs, s = g.first, [g.accuracies[s] for s in sorted(g.accuracies)], g.sample
        gap, wins = None, ""
        if init == "pretrained" and (target, "scratch", K) in groups:
            c, wins = versus(g, groups[(target, "scratch", K)])
            gap = c.delta if c else None
        out.append(
            GroupRow(
                dataset=r.dataset,
                target=r.label,
                domain=r.domain,
                train_size=r.train_size,
                test_size=r.test_size,
                classes=r.classes,
                init=init,
                K=K,
                D=r.D,
                seeds=len(accs),
                accuracy_mean=_round(s.mean) if accs else None,
                accuracy_std=_round(s.sd) if accs else None,
                accuracy_min=_round(min(accs)) if accs else None,
                accuracy_max=_round(max(accs)) if accs else None,
                accuracies=";".join(f"{a:.2f}" for a in accs),
                gap_points=_round(gap),
                better_on_seeds=wins,
                steps=r.steps,
                batch_size=r.batch_size,
                flip=r.flip,
                cutout=r.cutout,
                failed=len(g.failed),
                source="measured",
                status="ok" if not g.failed else "some runs failed",
                error=g.failed[0].error if g.failed else None,
            )
        )
    for name in rows(4):
        size = {c: int(quote(4, name, c).value) for c in ("train", "test", "classes")}
        out.append(
            GroupRow(
                dataset=name,
                target=name,
                domain="the paper (ImageNet pre-training)",
                train_size=size["train"],
                test_size=size["test"],
                classes=size["classes"],
                init="pretrained",
                seeds=5,
                source="paper",
                status=NEEDS_ROOT,
                paper_accuracy=quote(4, name, "accuracy").value,
                paper_previous_best=quote(4, name, "previous best").text(),
            )
        )
    return out
