"""``make table4``: pre-train once (cached), fine-tune every target pretrained and from scratch, report.

    python -m gpipe_repro.report.table4 --publish reports/table4   # make table4: 5 seeds
    python -m gpipe_repro.report.table4 --quick                    # make table4-quick: 2 seeds, short
    python -m gpipe_repro.report.table4 --report-only              # regenerate from the result files

GPipe §4 (Table 4): AmoebaNet-B pre-trained on ImageNet, its softmax replaced by a randomly
initialised one with the target's classes, fine-tuned on each target with the same hyper-parameters,
flip + cutout; the mean of 5 runs. Here the same recipe runs small and offline
(``conf/experiment/table4_pretrain.yaml``, ``table4_finetune.yaml``; targets and seeds in
``table4_plan``): one pre-training, cached by its config under ``$GPIPE_CACHE/table4/``, then every
target x {pretrained, scratch} x seed as its own ``gpipe-run`` job (``jobs``), ``--jobs`` at a time,
and the lead target again at K = 2. A second invocation reuses every finished run; the report
(``table4_report``) is written from the result files into the work folder (``outputs/<variant>/``),
and copied to ``--publish`` (the canonical variant only).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import time
from dataclasses import asdict
from pathlib import Path
from types import FrameType
from typing import Any

from ..errors import UserError
from .jobs import Job, run_jobs
from .table4_plan import CANONICAL, FINETUNE, QUICK, Variant, finetune_jobs, pretrain_job
from .table4_report import write_report

__all__ = ["main", "run_table"]


def _sizes(jobs: list[Job]) -> None:
    """Each target's train/test sizes and classes, from the dataset itself (built once per target)."""
    from ..data import build_dataset

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
    from ..config.compose import compose

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


def _write_plan(work: Path, plan: dict[str, Any]) -> None:
    tmp = work / "plan.json.tmp"
    tmp.write_text(json.dumps(plan, indent=2, default=str) + "\n")
    tmp.replace(work / "plan.json")


def _sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt("SIGTERM")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m gpipe_repro.report.table4", description=__doc__.splitlines()[0]
    )
    ap.add_argument(
        "--quick", action="store_true", help=f"{QUICK.name}: {len(QUICK.seeds)} seeds, short runs"
    )
    ap.add_argument(
        "--jobs",
        type=int,
        default=max(1, min(4, os.cpu_count() or 1)),
        help="cores to keep busy: runs at a time (a K=2 run takes 2); default min(4, cores)",
    )
    ap.add_argument(
        "--work", type=Path, help="where the runs and the report go (default outputs/<variant>)"
    )
    ap.add_argument(
        "--publish", type=Path, help="also copy the report here (the canonical variant only)"
    )
    ap.add_argument("--timeout-s", type=float, default=3600.0, help="time limit of each run")
    ap.add_argument(
        "--wandb",
        action="store_true",
        help="log each run to wandb (offline) instead of logger=none",
    )
    ap.add_argument(
        "--report-only", action="store_true", help="regenerate the report from the work folder"
    )
    args = ap.parse_args(argv)
    variant = QUICK if args.quick else CANONICAL
    work: Path = args.work or Path("outputs") / variant.name
    if args.publish is not None and variant is not CANONICAL:
        print(
            f"table4: error: --publish {args.publish} is for the canonical table only (make table4); "
            f"{variant.name}'s report stays in {work}",
            file=sys.stderr,
        )
        return 2
    if args.jobs < 1:
        print(f"table4: error: --jobs={args.jobs} must be >= 1", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _sigterm)
    try:
        if not args.report_only:
            run_table(variant, work, slots=args.jobs, timeout_s=args.timeout_s, wandb=args.wandb)
        elif not (work / "plan.json").exists():
            print(
                f"table4: error: --report-only: {work}/plan.json not found; run without it first",
                file=sys.stderr,
            )
            return 2
    except UserError as err:
        print(f"table4: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(
            f"table4: stopped; the finished runs are kept in {work}/jobs/ and the same command "
            "continues where it stopped",
            file=sys.stderr,
        )
        return 130
    paths = write_report(work)
    print(f"table:  {paths['md']}\ncsv:    {paths['csv']}\nplot:   {paths['png']}")
    if args.publish is not None:
        args.publish.mkdir(parents=True, exist_ok=True)
        for p in paths.values():
            shutil.copy2(p, args.publish / p.name)
        print(f"report: {args.publish}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
