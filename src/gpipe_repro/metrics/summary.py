"""Merge the ranks' results into one ``RunMetrics`` (the ``metrics.json`` contract)."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..engine.events import Event, busy_time, measured_bubble
from ..engine.schedule import ideal_bubble
from .contract import (
    CurvePoint,
    EnvInfo,
    EvalMetrics,
    ModelInfo,
    PipelineInfo,
    PlanInfo,
    RunMetrics,
    StageMetrics,
)
from .hostload import SchedWindow, wait_share
from .progress import StepRecord, read_progress

if TYPE_CHECKING:
    from ..config import RunConfig
    from ..runplan.plan import RunPlan

__all__ = [
    "RankResult",
    "summarize",
    "base_metrics",
    "plan_info",
    "env_info",
    "git_commit",
    "timed_from",
    "stopped_metrics",
]


@dataclass
class RankResult:
    """One rank's share of a run's metrics, returned by ``rank.run_rank``."""

    rank: int
    stage: int
    replica: int
    balance: list[int]
    costs: list[float]
    balance_cost: str  # what the partition balanced (``BalanceChoice.describe``)
    layer_names: list[str]
    param_count: int
    param_bytes: int
    grad_bytes: int
    optimizer_bytes: int
    activation_bytes: int
    allocator_peak_bytes: int | None  # CUDA's allocator peak over the timed steps; None on a CPU
    losses: list[float]  # every step's, including those before a resume
    step_times: list[float]  # the steps this process ran
    samples: list[int]  # per step run: samples (sentences) in the global mini-batch (last stage)
    tokens: list[int]  # per step run: target tokens in it (sequence models; else [])
    first_step: int  # the step this process started at (> 0 after a resume)
    stopped: bool  # stopped early by SIGINT/SIGTERM (after a completed step)
    events: list[dict[str, Any]]
    eval: EvalMetrics | None
    threads: int
    device_name: str
    host_memory: str
    curve: list[CurvePoint] = field(default_factory=list)  # train.eval_every (reporter rank)
    sched: SchedWindow | None = None  # its threads' scheduler accounting over its steps


def timed_from(spec: RunConfig, start: int) -> int:
    """The first of this process's steps whose time counts: after the warm-up, or after the first
    step of a resumed run (its shape handshake and cold caches)."""
    return spec.train.timed_from if start == 0 else min(spec.train.timed_from, 1)


REPORTS = "reports"  # generated results: a published report does not make the code dirty


TREE_MANIFEST = (
    ".tree.json"  # a copy of the tree without .git states its commit here (make tree-manifest)
)


def git_blob_sha(data: bytes) -> str:
    """Git's object name of a file's contents (what ``git ls-files -s`` lists)."""
    import hashlib

    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def manifest_commit(root: Path) -> str | None:
    """The commit a ``.tree.json`` states for a copy of the tree sent without its history (the
    device tool's GPU host gets the files, and a ``.git`` that need not be theirs), ``-dirty``
    appended when a listed file outside ``reports/`` is missing or differs from the commit's blob;
    None without a manifest."""
    import json

    f = root / TREE_MANIFEST
    if not f.is_file():
        return None
    m = json.loads(f.read_text())
    changed = False
    for path, sha in m["files"].items():
        if path.startswith(REPORTS + "/"):
            continue
        p = root / path
        if not p.is_file() or git_blob_sha(p.read_bytes()) != sha:
            changed = True
            break
    return str(m["commit"]) + ("-dirty" if changed else "")


def git_commit(repo: Path | None = None) -> str | None:
    """The project's commit (short hash), ``-dirty`` appended when tracked files differ from it.
    Changes under ``reports/`` do not count: one make target publishes a sweep's report there and
    then runs its next sweep (``make table2``), whose jobs ran the same code. Where git has no
    commit or calls the tree dirty, a ``.tree.json`` (``make tree-manifest``) whose every file
    matches names the commit instead: the files are that commit's, whatever ``.git`` came along."""
    root = str(repo or Path(__file__).resolve().parents[3])

    def git(*args: str) -> str:
        out = subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, timeout=5)
        return out.stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = head and git(
            "status", "--porcelain", "--untracked-files=no", "--", ".", f":(exclude){REPORTS}"
        )
    except (OSError, subprocess.SubprocessError):
        head, dirty = "", ""
    if head and not dirty:
        return head
    stated = manifest_commit(Path(root))
    if stated and (not head or not stated.endswith("-dirty")):
        return stated
    return (head + "-dirty") if head else None


def env_info(results: Sequence[RankResult] = (), launcher: str = "local") -> EnvInfo:
    env = EnvInfo(
        torch=torch.__version__,
        python=platform.python_version(),
        host=platform.node(),
        git_commit=git_commit(),
        launcher=launcher,
        cuda_devices=torch.cuda.device_count() if torch.cuda.is_available() else 0,
        nccl={k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
    )
    if results:
        env.device_names = sorted({r.device_name for r in results})
        env.threads_per_rank = results[0].threads
        env.host_memory = sorted({r.host_memory for r in results})  # what each rank has in effect
    return env


def _options(cfg: Any) -> dict[str, Any]:
    d = asdict(cfg)
    d.pop("name", None)
    return d


def base_metrics(
    spec: RunConfig,
    status: str = "ok",
    error: str | None = None,
    launcher: str = "local",
    hardware: dict[str, Any] | None = None,
) -> RunMetrics:
    """What is known of a run before it runs: its configuration (``hardware``: the simulated run's
    hardware record; by default its profile's name) and, for a run that runs (``status`` ok; a
    stopped run's record has none), its schedule's ideal bubble, whichever backend runs it."""
    p = spec.pipeline
    simulated = spec.backend == "sim"
    m = RunMetrics(
        source="simulated" if simulated else "measured",
        hardware=(hardware or {"name": spec.hardware.name}) if simulated else None,
        status=status,
        error=error,
        model=ModelInfo(name=spec.model.name, config=_options(spec.model)),
        data={"name": spec.data.name, **_options(spec.data)},
        pipeline=PipelineInfo(
            K=p.K,
            M=p.M,
            checkpoint=p.checkpoint if isinstance(p.checkpoint, str) else ",".join(p.checkpoint),
            schedule=p.schedule,
            virtual_stages=p.virtual_stages,
            balance=list(p.balance) if p.balance else None,
            # not used when pipeline.balance gave the cells (plan=auto: the planner's, by time)
            balance_by=p.balance_by if p.balance is None or spec.plan.mode == "auto" else None,
            replicas=p.replicas,
        ),
        optim={"name": spec.optim.name, **_options(spec.optim)},
        batch_size=spec.train.batch_size,
        batch_mode=spec.train.batch_mode,
        steps=spec.train.steps,
        warmup_steps=spec.train.timed_from,
        seed=spec.seed,
        precision=spec.train.precision,
        device="cuda" if spec.device.startswith("cuda") else "cpu",
        world_size=spec.world_size,
        experiment=spec.experiment_name,
        env=env_info(launcher=launcher),
    )
    if status == "ok":  # (K-1)/(M+K-1) for gpipe (GPipe §2.3); each schedule its own
        m.bubble_ideal = ideal_bubble(p.schedule, p.K, p.M, p.virtual_stages)
    return m


def plan_info(plan: RunPlan) -> PlanInfo:
    mem = plan.memory
    return PlanInfo(
        micro_batch=plan.micro_batch,
        planned_micro_batch=plan.sentences,
        balance_cost=plan.choice.describe(),
        memory_where=mem.where,
        memory_total_bytes=mem.total,
        memory_free_bytes=mem.free,
        memory_headroom_bytes=mem.headroom,
        memory_shared=mem.shared,
        memory_budget_bytes=mem.budget(plan.world_size if mem.shared else 1),
        planned_stage_bytes=plan.planned_bytes(),
        auto=plan.auto,
    )


def summarize(
    plan: RunPlan, results: Sequence[RankResult], launcher: str = "local"
) -> tuple[RunMetrics, list[Event]]:
    """metrics.json content and the events of the steps kept for trace.json."""
    spec = plan.spec
    m = base_metrics(spec, launcher=launcher)  # the run as configured; below, as it ran
    K = spec.pipeline.K
    results = sorted(results, key=lambda r: r.rank)
    W = timed_from(spec, results[0].first_step)
    # Step time: the slowest rank of each step this process ran, median over the timed ones (none:
    # a resumed run that had nothing left to run).
    per_step = [max(r.step_times[s] for r in results) for s in range(len(results[0].step_times))]
    step_time = statistics.median(per_step[W:] or per_step) if per_step else None
    # Global loss: mean over the replicas' last stages.
    lasts = [r for r in results if r.stage == K - 1]
    losses = [statistics.fmean(vals) for vals in zip(*[r.losses for r in lasts])]
    rep0 = [r for r in results if r.replica == 0]
    events = [Event(**e) for r in rep0 for e in r.events]
    steps = sorted({e.step for e in events if e.step >= W})
    bubbles, busy_per_stage, recompute_per_stage = [], [], []
    for s in steps:
        _, bubble, busy = measured_bubble(
            [e for e in events if e.step == s and e.action != "step"], K
        )
        bubbles.append(bubble)
        busy_per_stage.append(busy)
        recompute_per_stage.append(
            [
                busy_time(e for e in events if (e.step, e.stage, e.action) == (s, k, "recompute"))
                for k in range(K)
            ]
        )
    stages = []
    for r in rep0:
        accounted = r.param_bytes + r.grad_bytes + r.optimizer_bytes + r.activation_bytes
        stages.append(
            StageMetrics(
                stage=r.stage,
                layers=len(r.layer_names),
                layer_names=r.layer_names,
                param_count=r.param_count,
                param_bytes=r.param_bytes,
                grad_bytes=r.grad_bytes,
                optimizer_bytes=r.optimizer_bytes,
                activation_bytes=r.activation_bytes,
                peak_memory_bytes=(
                    r.allocator_peak_bytes if r.allocator_peak_bytes is not None else accounted
                ),
                accounted_memory_bytes=accounted,
                memory_source="cuda_allocator"
                if r.allocator_peak_bytes is not None
                else "accounted",
                busy_s=statistics.median([b[r.stage] for b in busy_per_stage])
                if busy_per_stage
                else 0.0,
                recompute_s=statistics.median([b[r.stage] for b in recompute_per_stage])
                if recompute_per_stage
                else 0.0,
            )
        )
    ev = next((r.eval for r in lasts if r.replica == 0), None)
    assert m.model is not None and m.pipeline is not None
    m.plan = plan_info(plan)
    m.plan.balance_cost = results[0].balance_cost  # balance_by=time: as the ranks measured it
    if any(r.stopped for r in results):
        done = results[0].first_step + len(results[0].step_times)
        m.status, m.error = (
            "interrupted",
            f"stopped by SIGINT/SIGTERM after step {done} of {spec.train.steps}",
        )
    m.model.param_count = sum(s.param_count for s in stages)
    m.pipeline.balance = results[0].balance
    m.losses = list[float | None](losses)
    m.step_time_s = step_time
    m.step_times_s = per_step
    # Throughput from the samples and tokens the last stage counted in the timed steps (translation
    # batches are built by tokens, so samples per step vary); every other dataset gives batch_size.
    rep = next((r for r in lasts if r.replica == 0), results[-1])
    t_sum = sum(per_step[W:] or per_step)
    n_sum = sum(rep.samples[W:] or rep.samples) if rep.samples else None
    if step_time is not None:
        m.throughput = n_sum / t_sum if n_sum else spec.train.batch_size / step_time
        m.tokens_per_s = (sum(rep.tokens[W:] or rep.tokens) / t_sum) if rep.tokens else None
    m.bubble_fraction = statistics.median(bubbles) if bubbles else 0.0
    m.host_wait_share = wait_share([r.sched for r in results])
    m.stages = stages
    m.layer_costs = results[0].costs
    m.eval = ev
    m.curve = list(rep.curve)
    m.env = env_info(results, launcher)
    keep = set(steps[-spec.train.trace_steps :])
    return m, [e for r in results for e in (Event(**d) for d in r.events) if e.step in keep]


def stopped_metrics(
    spec: RunConfig, progress: Path, launcher: str, status: str, error: str
) -> RunMetrics:
    """Metrics of a run that did not finish: its config and the steps the last stage reported in
    ``progress`` (a resumed run's record holds its earlier attempts' steps too; a step run again
    replaces its earlier record)."""
    m = base_metrics(spec, status, error, launcher)
    by_step = {r.step: r for r in read_progress(progress)}
    recs: list[StepRecord] = []
    while len(recs) in by_step:
        recs.append(by_step[len(recs)])
    m.losses = [r.loss for r in recs]
    m.step_times_s = [r.step_time_s for r in recs]
    return m
