"""Table 4 (GPipe §4): transfer learning — pre-train once (cached), fine-tune every target
pretrained and from scratch, the same budget (the method: ``experiments/table4/README.md``).

    python -m gpipe_repro.paper table4 --publish           # make table4: 5 seeds -> reports/table4/
    python -m gpipe_repro.paper table4 --quick             # make table4-quick: 2 seeds, short runs
    python -m gpipe_repro.paper table4 --from WORK         # the report of a work folder's runs

Collect: every run (``results.RunRow``: ``runs.csv``) and the plan as run (``plan.json``); a second
invocation reuses every finished run. Summary: per target over seeds (``results.csv``), fine-tuned
against scratch by ``paper.stats``. Page: ``templates/table4.md.j2`` and ``table4.png``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...errors import UserError
from ...measure.transfer_jobs import CANONICAL, QUICK, run_table, sigterm, write_plan
from ...runner.jobs import read_job
from ...studies.published import quote
from ...studies.published import rows as paper_rows
from ...typed_csv import write_csv
from ..artefact import Artefact, Report
from ..claims import LEAD, answers
from ..plot import figure
from ..provenance import Provenance
from ..runs import read_run
from ..stats import RULE, sample, trend
from ..template import render
from .results import (
    NEEDS_ROOT,
    OPTIONS,
    Group,
    GroupRow,
    RunRow,
    group,
    group_rows,
    k_check,
    ladder,
    load_runs,
    versus,
)

PAPER = ("train", "test", "classes", "accuracy", "previous best")  # the paper's Table 4 columns


def _pretrain(pt: dict[str, Any]) -> dict[str, Any]:
    """A pre-training of the plan with what its own files say: how it ended, its accuracy, its data."""
    pt = dict(pt)
    folder = Path(pt.get("folder", ""))
    m, job = read_run(folder), read_job(folder) or {}
    data = (job.get("meta") or {}).get("data") or {}
    pt.update(
        status=m.status if (folder / "metrics.json").exists() else "missing",
        steps=m.steps,
        batch_size=m.batch_size,
        accuracy=m.eval.accuracy if m.eval else None,
        samples=m.eval.samples if m.eval else None,
        seconds=job.get("seconds"),
        data={"name": data.get("name"), "classes": data.get("classes")},
        D=(job.get("meta") or {}).get("D"),
    )
    return pt


class Table4(Artefact[RunRow]):
    """Table 4: transfer learning, fine-tuned vs trained from scratch (GPipe §4)."""

    name = folder = "table4"
    row = RunRow
    command = "make table4"
    csv = "runs.csv"
    siblings = ("plan.json",)

    def options(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--quick",
            action="store_true",
            help=f"{QUICK.name}: {len(QUICK.seeds)} seeds, short runs",
        )
        parser.add_argument(
            "--jobs",
            type=int,
            default=max(1, min(4, os.cpu_count() or 1)),
            help="cores to keep busy: runs at a time (a K=2 run takes 2); default min(4, cores)",
        )
        parser.add_argument(
            "--timeout-s", type=float, default=3600.0, help="time limit of each run"
        )
        parser.add_argument("--wandb", action="store_true", help="log each run to wandb (offline)")

    def check(self, opts: argparse.Namespace) -> str | None:
        return f"--jobs={opts.jobs} must be >= 1" if opts.jobs < 1 else None

    def variant(self, opts: argparse.Namespace) -> str | None:
        return QUICK.name if getattr(opts, "quick", False) else None

    def work(self, opts: argparse.Namespace) -> Path:
        return Path("outputs") / (self.variant(opts) or CANONICAL.name)

    def collect(self, source: Path | None, opts: argparse.Namespace, out: Path) -> Report[RunRow]:
        work = source or out
        if source is None:
            signal.signal(signal.SIGTERM, sigterm)  # stop like Ctrl-C: the finished runs are kept
            variant = QUICK if opts.quick else CANONICAL
            run_table(variant, work, slots=opts.jobs, timeout_s=opts.timeout_s, wandb=opts.wandb)
        try:
            plan = json.loads((work / "plan.json").read_text())
        except (OSError, ValueError):
            raise UserError(f"{work}/plan.json not found; run without --from first") from None
        plan["pretrain"] = _pretrain(plan.get("pretrain") or {})
        plan["rungs"] = {D: _pretrain(pt) for D, pt in (plan.get("rungs") or {}).items()}
        write_plan(out, plan)
        runs, envs = load_runs(work)
        return Report(runs, Provenance.of_jobs(envs, work))

    def render(self, report: Report[RunRow], out: Path) -> list[Path]:
        plan = json.loads((out / "plan.json").read_text())
        groups = group(report.rows, [t["key"] for t in plan.get("targets") or []])
        csv, md, png = out / "results.csv", out / "table4.md", out / "table4.png"
        write_csv(csv, GroupRow, group_rows(groups))
        title = f"Table 4 — transfer learning ({plan.get('variant', '?')})"
        judged = answers("table4", out)
        md.write_text(
            render("table4", report.provenance, title, judged, LEAD,
                   **summary(plan, groups, report.rows))
        )  # fmt: skip
        seeds = len(plan.get("seeds") or [])
        title = f"Table 4 ({plan.get('variant', '?')}): fine-tuned vs from scratch, mean ± sd over {seeds} seeds (dots: each seed)"
        plot(groups, png, title, (plan.get("ladder") or {}).get("target", ""))
        return [csv, md, png]


def _gains(pre: Group, scratch: Group | None) -> list[float]:
    """Fine-tuned minus scratch per seed (paired by seed)."""
    if scratch is None:
        return []
    seeds = sorted(pre.accuracies.keys() & scratch.accuracies.keys())
    return [pre.accuracies[s] - scratch.accuracies[s] for s in seeds]


def _ours(groups: dict[tuple[str, str, int], Group]) -> list[tuple[Any, ...]]:
    """Each target at K = 1: fine-tuned, from scratch (None: not run), their comparison (None:
    not comparable) and the seeds fine-tuned beat scratch on."""
    out = []
    for (target, init, K), g in groups.items():
        if init == "pretrained" and K == 1:
            s = groups.get((target, "scratch", 1))
            out.append((g, s, *(versus(g, s) if s else (None, ""))))
    return out


def _ladder(plan: dict[str, Any], groups: dict[tuple[str, str, int], Group]) -> dict[str, Any]:
    """The capacity ladder: each pre-trained size fine-tuned vs scratch, and the trends over D
    (empty: no rung ran)."""
    steps = ladder(groups, (plan.get("ladder") or {}).get("target", ""))
    if not steps:
        return {}
    pres, main = plan.get("rungs") or {}, plan.get("pretrain") or {}  # plan.json's: D as a string
    rungs = [
        {"D": D, "pre": pre, "scratch": scratch, "gains": _gains(pre, scratch),
         "accuracy": (pres.get(str(D)) or (main if main.get("D") == D else {})).get("accuracy"),
         "versus": versus(pre, scratch)[0] if scratch else None}
        for D, pre, scratch in steps
    ]  # fmt: skip
    labels = [f"D = {D}" for D, _, _ in steps]
    trends = []
    for what, samples in (
        ("fine-tuned accuracy", [pre.sample for _, pre, _ in steps]),
        ("from-scratch accuracy", [s.sample for _, _, s in steps if s]),
        ("the gain of pre-training (points)", [sample(_gains(p, s)) for _, p, s in steps]),
    ):
        if len(samples) == len(steps):
            trends.append(trend(samples, labels, what, True)[0])
    return {"target": steps[0][1].first.label.split(", D =")[0], "rungs": rungs, "trends": trends}


def _checks(groups: dict[tuple[str, str, int], Group]) -> dict[str, Any]:
    """The same fine-tune at K = 1 and K > 1, seed by seed (empty: none ran at K > 1)."""
    checks = k_check(groups)
    if not checks:
        return {}
    diffs = [abs(r.accuracy - a1) for r, a1 in checks if r.accuracy is not None and a1 is not None]
    return {
        "same_accuracy": sum(a1 is not None and a1 == r.accuracy for r, a1 in checks),
        "same_losses": sum(bool(r.losses_equal_k1) for r, _ in checks),
        "largest": max(diffs) if diffs else None,
        "pairs": checks,
    }


def summary(
    plan: dict[str, Any], groups: dict[tuple[str, str, int], Group], runs: Sequence[RunRow]
) -> dict[str, Any]:
    """What the page says, from the runs and the plan as run (the recipe, the pre-training):
    each target fine-tuned against from scratch, the capacity ladder, K = 1 against K = 2, the
    paper's."""
    return {
        "plan": plan, "seeds": len(plan.get("seeds") or []), "ours": _ours(groups), "rule": RULE,
        "ladder": _ladder(plan, groups), "checks": _checks(groups),
        "paper": {name: {c: quote(4, name, c) for c in PAPER} for name in paper_rows(4)},
        "options": OPTIONS, "needs_root": NEEDS_ROOT,
        "ok": sum(r.status == "ok" for r in runs), "runs": len(runs),
        "spent": sum(r.seconds or 0.0 for r in runs),
    }  # fmt: skip


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


ARTEFACT = Table4()
