"""Table 4 as an artefact: pre-train once (cached), fine-tune every target pretrained and from scratch.

    python -m gpipe_repro.paper table4 --publish           # make table4: 5 seeds -> reports/table4/
    python -m gpipe_repro.paper table4 --quick             # make table4-quick: 2 seeds, short runs
    python -m gpipe_repro.paper table4 --from WORK         # the report of a work folder's runs

GPipe §4 (Table 4): AmoebaNet-B pre-trained on ImageNet, its softmax replaced by a randomly
initialised one with the target's classes, fine-tuned on each target with the same hyper-parameters,
flip + cutout; the mean of 5 runs. Here the same recipe runs small and offline (experiments:
``plan``): one pre-training, cached by its config, then every target x {pretrained, scratch} x seed
as its own ``gpipe-run`` job (``runner.jobs``), ``--jobs`` at a time, and the lead target again at
K = 2. A second invocation reuses every finished run. Collect: every run (``results.RunRow``:
``runs.csv``) and the plan as run (``plan.json``). Render: ``results.csv`` (over seeds),
``table4.md``, ``table4.png`` (``text``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from dataclasses import asdict
from pathlib import Path
from types import FrameType
from typing import Any

from ...errors import UserError
from ...runner.jobs import Job, read_job, run_jobs
from ..artefact import Artefact, Report
from ..provenance import Provenance
from ..rows import write_csv
from ..runs import read_run
from .plan import CANONICAL, FINETUNE, QUICK, Variant, finetune_jobs, pretrain_job
from .results import GroupRow, RunRow, group, group_rows, load_runs
from .text import markdown, plot

__all__ = ["Table4", "ARTEFACT", "run_table"]


def _sizes(jobs: list[Job]) -> None:
    """Each target's train/test sizes and classes, from the dataset itself (built once per target)."""
    from ...data import build_dataset

    seen: dict[str, dict[str, Any]] = {}
    for job in jobs:
        target = job.meta["target"]
        if target not in seen:
            data = dict(job.meta["data"])
            d = build_dataset(data.pop("name"), data).describe()
            seen[target] = {
                "train_size": d.get("train_size"),
                "test_size": d.get("eval_size"),
                "classes": d.get("classes"),
            }
        job.meta["dataset"] = seen[target]


def _recipe(variant: Variant) -> dict[str, Any]:
    from ...config.compose import compose

    spec = compose([f"experiment={FINETUNE}", *variant.finetune], check=False)
    return {
        "model": {
            "name": spec.model.name,
            **{k: v for k, v in asdict(spec.model).items() if k != "name"},
        },
        "optim": asdict(spec.optim),
        "batch_size": spec.train.batch_size,
        "steps": spec.train.steps,
        "lr_schedule": spec.train.lr_schedule,
        "image_size": spec.data.image_size,
        "cutout": spec.data.cutout,
        "M": spec.pipeline.M,
        "threads": spec.train.threads,
    }


def _write_plan(work: Path, plan: dict[str, Any]) -> None:
    tmp = work / "plan.json.tmp"
    tmp.write_text(json.dumps(plan, indent=2, default=str) + "\n")
    tmp.replace(work / "plan.json")


def run_table(
    variant: Variant,
    work: Path,
    *,
    slots: int,
    timeout_s: float,
    wandb: bool = False,
    cache: Path | None = None,
) -> dict[str, Any]:
    """Run (or reuse) every job of ``variant`` and write ``work/plan.json``; returns the plan."""
    t0 = time.monotonic()
    pre, save = pretrain_job(variant, wandb=wandb, cache=cache)
    if not save.is_dir():  # a cached pre-training whose save is gone is trained again
        (pre.folder / "job.json").unlink(missing_ok=True)
    jobs = finetune_jobs(variant, save, work, wandb=wandb, after=pre.name)
    _sizes(jobs)
    plan: dict[str, Any] = {
        "variant": variant.name,
        "seeds": list(variant.seeds),
        "k_check": list(variant.k_check),
        "targets": [asdict(t) for t in variant.targets],
        "recipe": _recipe(variant),
        "pretrain": {
            "folder": str(pre.folder),
            "save": str(save),
            "key": pre.meta["key"],
            "argv": pre.argv,
        },
        "cores": os.cpu_count(),
        "jobs": slots,
    }
    work.mkdir(parents=True, exist_ok=True)
    _write_plan(work, plan)
    print(
        f"table4 ({variant.name}): 1 pre-training + {len(jobs)} fine-tuning runs, {slots} at a time; "
        f"runs in {work}/jobs/, pre-training in {pre.folder}",
        flush=True,
    )
    outcomes = run_jobs([pre, *jobs], slots=slots, timeout_s=timeout_s)
    plan["pretrain"]["reused"] = outcomes[pre.name].reused
    plan["wall_s"] = round(time.monotonic() - t0, 1)
    _write_plan(work, plan)
    return plan


def _pretrain(plan: dict[str, Any]) -> dict[str, Any]:
    """The plan's pre-training with what its own files say: how it ended, its accuracy, its data."""
    pt = dict(plan.get("pretrain") or {})
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
    )
    return pt


def _sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt("SIGTERM")


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
            signal.signal(signal.SIGTERM, _sigterm)  # stop like Ctrl-C: the finished runs are kept
            variant = QUICK if opts.quick else CANONICAL
            run_table(variant, work, slots=opts.jobs, timeout_s=opts.timeout_s, wandb=opts.wandb)
        try:
            plan = json.loads((work / "plan.json").read_text())
        except (OSError, ValueError):
            raise UserError(f"{work}/plan.json not found; run without --from first") from None
        plan["pretrain"] = _pretrain(plan)
        _write_plan(out, plan)
        runs, envs = load_runs(work)
        return Report(runs, Provenance.of_jobs(envs, work))

    def render(self, report: Report[RunRow], out: Path) -> list[Path]:
        plan = json.loads((out / "plan.json").read_text())
        groups = group(report.rows, [t["key"] for t in plan.get("targets") or []])
        csv, md, png = out / "results.csv", out / "table4.md", out / "table4.png"
        write_csv(csv, GroupRow, group_rows(groups))
        md.write_text(markdown(plan, groups, report.rows, report.provenance))
        seeds = len(plan.get("seeds") or [])
        title = f"Table 4 ({plan.get('variant', '?')}): fine-tuned vs from scratch (gap in points), mean ± std over {seeds} seeds"
        plot(groups, png, title)
        return [csv, md, png]


ARTEFACT = Table4()
