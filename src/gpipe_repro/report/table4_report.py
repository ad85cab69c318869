"""Table 4's report from its result files: ``results.csv``, ``table4.md`` and ``table4.png``.

Reads a work folder written by ``report.table4`` (``plan.json``: the variant, the recipe, the targets,
the pre-training's save; the runs: ``table4_results``) and nothing else, so the report can be
regenerated from the files at any time (``python -m gpipe_repro.report.table4 --report-only``). Every
accuracy is measured, single-crop, on the target's own test split, in percent; mean ± sample standard
deviation over seeds. The paper's rows stand beside ours, marked "needs data.root".
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .jobs import read_job
from .table4_results import (
    COLUMNS,
    NEEDS_ROOT,
    PAPER,
    Group,
    Run,
    csv_rows,
    k_check,
    load_runs,
    read_json,
    summarise,
    versus,
)

__all__ = ["markdown", "plot", "write_report"]


def _pct(v: float | None, digits: int = 2) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def _pretrain_line(plan: dict[str, Any]) -> str:
    pt = plan.get("pretrain") or {}
    m = read_json(Path(pt.get("folder", "")) / "metrics.json") or {}
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
        gap, wins = versus(g, s) if s else (None, "")
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
    for i, t in enumerate(targets):  # the gap, over each pair
        pre, scratch = groups.get((t, "pretrained", 1)), groups.get((t, "scratch", 1))
        gap = versus(pre, scratch)[0] if pre and scratch else None
        if gap is not None and lows:
            ax.text(i, max(lows) + 1.2, f"{gap:+.2f}", ha="center", fontsize=8)
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
        env = (read_json(Path(work) / "jobs" / r.name / "metrics.json") or {}).get("env") or {}
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
    plan = read_json(work / "plan.json") or {}
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
        f"Table 4 ({plan.get('variant', '?')}): fine-tuned vs from scratch (gap in points), "
        f"mean ± std over {len(plan.get('seeds') or [])} seeds",
    )
    return paths
