"""Table 4's report from its result files: ``results.csv``, ``table4.md`` and ``table4.png``.

Reads a work folder written by ``report.table4`` — ``plan.json`` (the variant, the targets, the
pre-training's save) and one folder per run under ``jobs/`` (``job.json``: what it was, and the run's
own ``metrics.json``) — and nothing else, so the report can be regenerated from the files at any time
(``python -m gpipe_repro.report.table4 --report-only``). Every accuracy in it is measured on the
target's own test split (single crop), as a percentage; mean ± sample standard deviation over seeds.
The paper's rows (GPIPE.md §7) stand beside ours; its datasets are not on this machine: "needs
data.root".
"""

from __future__ import annotations

import csv
import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .jobs import read_job

__all__ = [
    "PAPER",
    "PaperRow",
    "Run",
    "load_runs",
    "summarise",
    "k_check",
    "write_report",
    "COLUMNS",
    "NEEDS_ROOT",
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


def _read(path: Path) -> dict[str, Any] | None:
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
            m = _read(folder / sub / "metrics.json") or {}
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


def _versus(pre: Group, scratch: Group) -> tuple[float | None, str]:
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


def _pct(v: float | None, digits: int = 2) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def csv_rows(groups: dict[tuple[str, str, int], Group]) -> list[dict[str, Any]]:
    rows = []
    for (target, init, K), g in groups.items():
        r = g.first
        gap, wins = None, ""
        if init == "pretrained" and (target, "scratch", K) in groups:
            gap, wins = _versus(g, groups[(target, "scratch", K)])
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


def _pretrain_line(plan: dict[str, Any]) -> str:
    pt = plan.get("pretrain") or {}
    m = _read(Path(pt.get("folder", "")) / "metrics.json") or {}
    job = read_job(Path(pt.get("folder", ""))) or {}
    acc = (m.get("eval") or {}).get("accuracy")
    data = (job.get("meta") or {}).get("data") or {}
    how = (
        "reused from the cache"
        if pt.get("reused")
        else f"trained by this invocation in {job.get('seconds', 0):.0f} s"
    )
    return (
        f"**Pre-training** (measured, once, {how}): save `{pt.get('save')}` (key `{pt.get('key')}`), "
        f"{data.get('name', '?')} classes {data.get('classes')}, {m.get('steps', '?')} steps of "
        f"{m.get('batch_size', '?')}; test accuracy on those classes' test split: "
        f"**{_pct(100 * acc if acc is not None else None)}%** ({(m.get('eval') or {}).get('samples', '?')} "
        f"images); status {m.get('status', 'missing')}."
    )


def _recipe_line(plan: dict[str, Any]) -> str:
    r = plan.get("recipe") or {}
    model, optim = r.get("model") or {}, dict(r.get("optim") or {})
    size = ", ".join(f"{k}={v}" for k, v in model.items() if k != "name")
    opt = ", ".join(f"{k} {v}" for k, v in optim.items() if k != "name")
    return (
        f"**Recipe** (GPipe §4, small): {model.get('name', '?')} ({size}); the last layer (the softmax) "
        f"replaced by a fresh one with the target's classes, every other layer from the save; inputs "
        f"resized to {r.get('image_size', '?')}x{r.get('image_size', '?')}; per-sample per-epoch random "
        f"horizontal flip (on for clothing, off for digits: it turns a 2 into a 5) and cutout "
        f"{r.get('cutout', '?')}px; {optim.get('name', '?')} ({opt}) with a {r.get('lr_schedule', '?')} "
        f"schedule, the pre-training's hyper-parameters; {r.get('steps', '?')} fine-tuning steps of "
        f"{r.get('batch_size', '?')} images, M = {r.get('M', '?')}; single-crop accuracy on the target's "
        f"own test split."
    )


def markdown(
    plan: dict[str, Any],
    groups: dict[tuple[str, str, int], Group],
    runs: Sequence[Run],
    header: str,
) -> str:
    seeds = len(plan.get("seeds") or [])
    lines = [
        f"# Table 4 — transfer learning ({plan.get('variant', '?')})",
        "",
        header,
        "",
        _recipe_line(plan),
        "",
        _pretrain_line(plan),
        "",
        f"## Ours (measured): fine-tuned vs trained from scratch, K = 1, {seeds} seeds",
        "",
        "Same recipe and budget for both (steps, batch, cosine schedule, augmentation, optimiser); "
        "only the initialisation differs. Accuracy in %, mean ± sample std over seeds; gap in points; "
        '"better on": seeds where fine-tuned beat scratch (paired by seed).',
        "",
        "| target | domain | train | test | classes | flip | fine-tuned % | from scratch % | gap | better on |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (target, init, K), g in groups.items():
        if init != "pretrained" or K != 1:
            continue
        s = groups.get((target, "scratch", 1))
        r = g.first
        gap, wins = _versus(g, s) if s else (None, "")
        failed = len(g.failed) + (len(s.failed) if s else 0)
        note = f" ({failed} failed: {(g.failed or s.failed)[0].error})" if failed and s else ""
        lines.append(
            f"| {r.label} | {r.domain} | {r.train_size or '?'} | {r.test_size or '?'} | "
            f"{r.classes or '?'} | {'yes' if r.flip else 'no'} | {_pct(g.mean)} ± {_pct(g.std)} | "
            f"{_pct(s.mean) if s else '—'} ± {_pct(s.std) if s else '—'} | "
            f"{'—' if gap is None else f'{gap:+.2f}'} | {wins}{note} |"
        )
    checks = k_check(groups)
    if checks:
        same_acc = sum(c["acc_k1"] is not None and c["acc_k1"] == c["acc_k"] for c in checks)
        same_loss = sum(c["losses_equal"] for c in checks)
        diffs = [
            abs(c["acc_k"] - c["acc_k1"])
            for c in checks
            if c["acc_k"] is not None and c["acc_k1"] is not None
        ]
        lines += [
            "",
            "## The same fine-tune at K = 1 and K = 2 (measured; synchronous updates, GPipe §2.2)",
            "",
            f"Equal accuracy on {same_acc}/{len(checks)} seeds (largest difference "
            f"{_pct(max(diffs) if diffs else None, 4)} points); every step's loss bit-equal on "
            f"{same_loss}/{len(checks)} seeds.",
            "",
            "| target | init | seed | K = 1 % | K = k % | k | losses equal (every step) |",
            "|---|---|---|---|---|---|---|",
        ]
        for c in checks:
            lines.append(
                f"| {c['target']} | {c['init']} | {c['seed']} | {_pct(c['acc_k1'], 4)} | "
                f"{_pct(c['acc_k'], 4)} | {c['K']} | {'yes' if c['losses_equal'] else 'no'} "
                f"({c['steps']} steps) |"
            )
    lines += [
        "",
        "## The paper's Table 4 (AmoebaNet-B(18, 512), ImageNet pre-training, 480x480; GPIPE.md §7)",
        "",
        "| dataset | train | test | classes | paper % | previous best % | ours |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in PAPER:
        how = (
            f"`data={p.option} data.root=...`"
            if p.option
            else "no data option yet (ImageFolder layout)"
            if p.dataset == "Birdsnap"
            else "the pre-training set; no data option"
        )
        lines.append(
            f"| {p.dataset} | {p.train:,} | {p.test:,} | {p.classes} | {p.accuracy} | {p.previous_best} | "
            f"{NEEDS_ROOT}: {how} |"
        )
    ok = [r for r in runs if r.status == "ok"]
    spent = sum(r.seconds or 0.0 for r in runs)
    lines += [
        "",
        f"{len(ok)}/{len(runs)} fine-tuning runs ok; they took {spent / 60:.1f} min of wall time in all "
        "(measured; each sweep's job.json records its own).",
        "",
    ]
    return "\n".join(lines)


def plot(groups: dict[tuple[str, str, int], Group], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    targets = list(dict.fromkeys(t for t, _, K in groups if K == 1))
    fig, ax = plt.subplots(figsize=(2.2 + 1.9 * len(targets), 4.2))
    width = 0.38
    for j, (init, color) in enumerate((("pretrained", "tab:blue"), ("scratch", "tab:gray"))):
        for i, t in enumerate(targets):
            g = groups.get((t, init, 1))
            if g is None or g.mean is None:
                continue
            x = i + (j - 0.5) * width
            ax.bar(
                x,
                g.mean,
                width,
                yerr=g.std,
                color=color,
                alpha=0.75,
                capsize=3,
                label=("fine-tuned" if init == "pretrained" else "from scratch")
                if i == 0
                else None,
            )
            ax.plot([x] * len(g.accuracies), list(g.accuracies.values()), "k.", ms=3)
    lows = [a for g in groups.values() for a in g.accuracies.values()]
    if lows:
        ax.set_ylim(max(0.0, min(lows) - 5), min(100.0, max(lows) + 3))
    ax.set_xticks(
        range(len(targets)),
        [
            groups[(t, "pretrained", 1)].first.label.replace(", ", ",\n", 1)
            if (t, "pretrained", 1) in groups
            else t
            for t in targets
        ],
        fontsize=7,
    )
    ax.set_ylabel("test accuracy % (measured)")
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _header(plan: dict[str, Any], work: Path, runs: Sequence[Run]) -> str:
    """Where and how the numbers were measured, from the runs' own metrics.json."""
    env: dict[str, Any] = {}
    for r in runs:
        env = (_read(Path(work) / "jobs" / r.name / "metrics.json") or {}).get("env") or {}
        if env.get("device_names"):
            break
    wall = plan.get("wall_s")
    return (
        f"Generated by `python -m gpipe_repro.report.table4` from the {len(runs)} runs in `{work}`. "
        f"Measured on {', '.join(env.get('device_names') or ['?'])} (host {env.get('host', '?')}, "
        f"{plan.get('cores', '?')} cores, {plan.get('jobs', '?')} runs at a time, "
        f"{env.get('threads_per_rank', '?')} thread per rank), torch {env.get('torch', '?')}, commit "
        f"{env.get('git_commit', '?')}"
        + (
            f"; this invocation took {wall / 60:.1f} min (wall, measured)."
            if wall is not None
            else "."
        )
    )


def write_report(work: Path, out: Path | None = None) -> dict[str, Path]:
    """Write results.csv, table4.md and table4.png for the runs in ``work`` into ``out`` (default
    ``work``); returns their paths."""
    work = Path(work)
    out = Path(out) if out is not None else work
    plan = _read(work / "plan.json") or {}
    runs = load_runs(work)
    groups = summarise(runs, [t["key"] for t in plan.get("targets") or []])
    header = _header(plan, work, runs)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out / "results.csv", "md": out / "table4.md", "png": out / "table4.png"}
    with paths["csv"].open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(csv_rows(groups))
    paths["md"].write_text(markdown(plan, groups, runs, header))
    plot(
        groups,
        paths["png"],
        f"Table 4 ({plan.get('variant', '?')}): fine-tuned vs from scratch, "
        f"mean ± std over {len(plan.get('seeds') or [])} seeds",
    )
    return paths
