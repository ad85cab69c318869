"""Table 4's page and plot, from its runs (``runs.csv``) and its plan as run (``plan.json``) alone.

Every accuracy is measured, single-crop, on the target's own test split, in percent; mean ± sample
standard deviation over seeds; fine-tuned against scratch judged by the one noise rule
(``paper.stats``). The paper's rows stand beside ours, marked "needs data.root".
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..numbers import quote, rows
from ..plot import figure
from ..provenance import Provenance
from ..stats import RULE, sample, trend
from .results import NEEDS_ROOT, OPTIONS, Group, RunRow, k_check, ladder, versus


def _pct(v: float | None, digits: int = 2) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def _pretrain_line(pt: dict[str, Any]) -> str:
    acc, data = pt.get("accuracy"), pt.get("data") or {}
    how = (
        "reused from the cache"
        if pt.get("reused")
        else f"trained by this invocation in {pt.get('seconds') or 0:.0f} s"
    )
    return (
        f"**Pre-training** (measured, once, {how}): save `{pt.get('save')}` (key `{pt.get('key')}`), "
        f"{data.get('name') or '?'} classes {data.get('classes')}, {pt.get('steps') or '?'} steps of "
        f"{pt.get('batch_size') or '?'}; test accuracy on those classes' test split: "
        f"**{_pct(100 * acc if acc is not None else None)}%** ({pt.get('samples') or '?'} "
        f"images); status {pt.get('status', 'missing')}."
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


def _ours(groups: dict[tuple[str, str, int], Group]) -> list[str]:
    lines = []
    for (target, init, K), g in groups.items():
        if init != "pretrained" or K != 1:
            continue
        s = groups.get((target, "scratch", 1))
        r, pre = g.first, g.sample
        c, wins = versus(g, s) if s else (None, "")
        failed = len(g.failed) + (len(s.failed) if s else 0)
        note = f" ({failed} failed: {(g.failed or s.failed)[0].error})" if failed and s else ""
        scratch = (
            f"{_pct(s.sample.mean if s.accuracies else None)} ± {_pct(s.sample.sd if s.accuracies else None)}"
            if s
            else "— ± —"
        )
        lines.append(
            f"| {r.label} | {r.domain} | {r.train_size or '?'} | {r.test_size or '?'} | "
            f"{r.classes or '?'} | {'yes' if r.flip else 'no'} | {_pct(pre.mean if g.accuracies else None)} ± "
            f"{_pct(pre.sd if g.accuracies else None)} | {scratch} | {'—' if c is None else c.text()} | {wins}{note} |"
        )
    return lines


def _gains(pre: Group, scratch: Group | None) -> list[float]:
    """Fine-tuned minus scratch per seed (paired by seed)."""
    if scratch is None:
        return []
    seeds = sorted(pre.accuracies.keys() & scratch.accuracies.keys())
    return [pre.accuracies[s] - scratch.accuracies[s] for s in seeds]


def _ladder(plan: dict[str, Any], groups: dict[tuple[str, str, int], Group]) -> list[str]:
    """The capacity ladder: each pre-trained size fine-tuned vs scratch, and the trends over D."""
    spec = plan.get("ladder") or {}
    steps = ladder(groups, spec.get("target", ""))
    if not steps:
        return []
    pres = {str(D): pt for D, pt in (plan.get("rungs") or {}).items()}
    main = plan.get("pretrain") or {}
    lines = [
        "",
        "## Capacity ladder (GPipe §4: large pre-trained networks transfer well), K = 1",
        "",
        f"{steps[0][1].first.label.split(', D =')[0]}; the body pre-trained with the same recipe at "
        "each width D, fine-tuned vs the same width from scratch. Gain = fine-tuned − scratch, per seed.",
        "",
        "| D | pre-training accuracy % | fine-tuned % | from scratch % | gap (rule) | gain per seed |",
        "|---|---|---|---|---|---|",
    ]
    for D, pre, scratch in steps:
        pt = pres.get(str(D)) or (main if main.get("D") == D else {})
        acc = pt.get("accuracy")
        c = versus(pre, scratch)[0] if scratch else None
        gains = ", ".join(f"{g:+.2f}" for g in _gains(pre, scratch))
        lines.append(
            f"| {D} | {_pct(100 * acc if acc is not None else None)} | {pre.sample.text()} | "
            f"{scratch.sample.text() if scratch else '—'} | {'—' if c is None else c.text()} | {gains} |"
        )
    labels = [f"D = {D}" for D, _, _ in steps]
    lines.append("")
    for what, samples in (
        ("fine-tuned accuracy", [pre.sample for _, pre, _ in steps]),
        ("from-scratch accuracy", [s.sample for _, _, s in steps if s]),
        ("the gain of pre-training (points)", [sample(_gains(p, s)) for _, p, s in steps]),
    ):
        if len(samples) == len(steps):
            lines.append(f"- Over D, {trend(samples, labels, what, True)[0]}")
    return lines


def markdown(
    plan: dict[str, Any],
    groups: dict[tuple[str, str, int], Group],
    runs: Sequence[RunRow],
    prov: Provenance,
) -> str:
    seeds = len(plan.get("seeds") or [])
    wall = plan.get("wall_s")
    lines = [
        *prov.page(f"Table 4 — transfer learning ({plan.get('variant', '?')})"),
        "",
        f"{plan.get('cores', '?')} cores, {plan.get('jobs', '?')} runs at a time"
        + (
            f"; this invocation took {wall / 60:.1f} min (wall, measured)."
            if wall is not None
            else "."
        ),
        "",
        _recipe_line(plan),
        "",
        _pretrain_line(plan.get("pretrain") or {}),
        "",
        f"## Ours (measured): fine-tuned vs trained from scratch, K = 1, {seeds} seeds",
        "",
        "Same recipe and budget for both (steps, batch, cosine schedule, augmentation, optimiser); "
        "only the initialisation differs. Accuracy in %, mean ± sample std over seeds; gap in points "
        "(fine-tuned − scratch) with Welch's test against the seed noise; "
        '"better on": seeds where fine-tuned beat scratch (paired by seed).',
        "",
        "| target | domain | train | test | classes | flip | fine-tuned % | from scratch % | gap | better on |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *_ours(groups),
        "",
        RULE,
        *_ladder(plan, groups),
    ]
    checks = k_check(groups)
    if checks:
        same_acc = sum(a1 is not None and a1 == r.accuracy for r, a1 in checks)
        same_loss = sum(bool(r.losses_equal_k1) for r, _ in checks)
        diffs = [
            abs(r.accuracy - a1) for r, a1 in checks if r.accuracy is not None and a1 is not None
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
        lines += [
            f"| {r.label} | {r.init} | {r.seed} | {_pct(a1, 4)} | {_pct(r.accuracy, 4)} | {r.K} | "
            f"{'yes' if r.losses_equal_k1 else 'no'} ({r.loss_steps} steps) |"
            for r, a1 in checks
        ]
    lines += [
        "",
        "## The paper's Table 4 (AmoebaNet-B(18, 512), ImageNet pre-training, 480x480; GPipe §4)",
        "",
        "| dataset | train | test | classes | paper % | previous best % | ours |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in rows(4):
        q = {
            c: quote(4, name, c) for c in ("train", "test", "classes", "accuracy", "previous best")
        }
        how = (
            f"`data={OPTIONS[name]} data.root=...`"
            if name in OPTIONS
            else "no data option yet (ImageFolder layout)"
            if name == "Birdsnap"
            else "the pre-training set; no data option"
        )
        train, test, classes = (int(q[c].value) for c in ("train", "test", "classes"))
        lines.append(
            f"| {name} | {train:,} | {test:,} | {classes} | {q['accuracy'].value} | "
            f"{q['previous best'].text()} | {NEEDS_ROOT}: {how} |"
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


def _dots(ax: Any, x: float, g: Group, color: str, label: str | None) -> None:
    """Mean ± sample sd as a dot with an interval, and each seed as a small dot beside it."""
    s = g.sample
    ax.errorbar(x, s.mean, yerr=s.sd, fmt="o", color=color, capsize=3, label=label)
    ax.plot([x + 0.08] * len(g.accuracies), list(g.accuracies.values()), ".", color=color, ms=3)


def plot(
    groups: dict[tuple[str, str, int], Group], path: Path, title: str, ladder_of: str = ""
) -> None:
    """Left: every target, fine-tuned vs scratch; right: the capacity ladder over D. Dots with
    intervals (mean ± sample sd over seeds), each seed beside them: no bar, no cut axis."""
    targets = list(dict.fromkeys(t for t, _, K in groups if K == 1))
    steps = ladder(groups, ladder_of)
    with figure(path, 1, 2, figsize=(3 + 1.6 * len(targets), 4.2), width_ratios=[2.4, 1]) as (
        fig,
        (ax, lad),
    ):
        for j, (init, color) in enumerate((("pretrained", "tab:blue"), ("scratch", "tab:gray"))):
            name = "fine-tuned" if init == "pretrained" else "from scratch"
            for i, t in enumerate(targets):
                g = groups.get((t, init, 1))
                if g is not None and g.accuracies:
                    _dots(ax, i + (j - 0.5) * 0.36, g, color, name if i == 0 else None)
            for D, pre, scratch in steps:
                g = pre if init == "pretrained" else scratch
                if g is not None and g.accuracies:
                    _dots(lad, math.log2(D) + (j - 0.5) * 0.3, g, color, None)
        labels = [
            textwrap.fill(groups[(t, "pretrained", 1)].first.label, 18)
            if (t, "pretrained", 1) in groups
            else t
            for t in targets
        ]
        ax.set_xticks(range(len(targets)), labels, fontsize=6)
        ax.set_ylabel("test accuracy % (measured), mean ± sd")
        ax.set_title(title, fontsize=8)
        lad.set(xlabel="pre-trained width D", title="capacity ladder (fine-tuned, scratch)")
        lad.set_xticks([math.log2(D) for D, _, _ in steps], [str(D) for D, _, _ in steps])
        for a in (ax, lad):
            a.grid(axis="y", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="lower right")
