"""The ``metrics.json`` contract: what one run reports, as types.

Every run writes one ``RunMetrics`` (``metrics.writer``), whichever launcher started it and whichever
backend produced its numbers (``source``: measured by the engine, or simulated). Sweeps, reports and
wandb read these keys and nothing else. ``docs/metrics.md`` and ``docs/metrics.schema.json`` are
generated from these classes (``python -m gpipe_repro.metrics.schema``); a test keeps them in step.
Reading back and the schema both come from the types through ``typed`` (pydantic).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, with_config

from ..engine.precision import PRECISIONS
from ..options import opt
from ..runplan.plan import AutoPlanInfo
from ..typed import dump, load

__all__ = [
    "STATUSES",
    "SOURCES",
    "StageMetrics",
    "EvalMetrics",
    "CurvePoint",
    "EnvInfo",
    "ModelInfo",
    "PipelineInfo",
    "PlanInfo",
    "AutoPlanInfo",
    "ResumeInfo",
    "RunMetrics",
    "load_metrics",
    "to_json",
]

STATUSES = ("ok", "failed", "interrupted", "diverged")
SOURCES = ("measured", "simulated")
MEMORY_SOURCES = ("accounted", "cuda_allocator", "planned")


@dataclass
class StageMetrics:
    """One pipeline stage (of replica 0)."""

    stage: int = opt(0, "stage index k (0 = first)")
    layers: int = opt(0, "layers in this stage's cell")
    layer_names: list[str] = opt([], "the cell's layer types, in order")
    param_count: int = opt(0, "parameters of the cell")
    param_bytes: int = opt(0, "bytes of the cell's parameters")
    grad_bytes: int = opt(0, "bytes of their gradients")
    optimizer_bytes: int = opt(0, "bytes of the optimiser's state for them")
    activation_bytes: int = opt(
        0, "peak bytes saved for backward plus boundary buffers, over a step"
    )
    peak_memory_bytes: int = opt(
        0,
        "the stage's peak memory: the CUDA allocator's peak where there is one, "
        "else accounted_memory_bytes",
    )
    accounted_memory_bytes: int = opt(0, "param + grad + optimizer + activation bytes")
    memory_source: str = opt("accounted", "what peak_memory_bytes is", choices=MEMORY_SOURCES)
    busy_s: float = opt(0.0, "median seconds per step computing (forward, backward, recompute)")
    recompute_s: float = opt(
        0.0, "median seconds per step recomputing (part of busy_s; 0: no remat)"
    )


@dataclass
class EvalMetrics:
    """Evaluation on the held-out split after training (through the pipeline, running statistics)."""

    accuracy: float | None = opt(None, "share of correct predictions (tokens for sequence models)")
    loss: float | None = opt(None, "mean loss per sample")
    samples: int = opt(0, "samples evaluated")
    bleu: float | None = opt(None, "corpus BLEU (translation)")
    bleu_signature: str | None = opt(None, "sacrebleu's signature of the BLEU score")
    by_language: dict[str, dict[str, Any]] | None = opt(
        None,
        "many->English (data.corpora): per source language its bleu, nll, sentences and labels "
        "(corpus, synthetic, resource high|low, train_pairs, copies)",
    )


@dataclass
class CurvePoint:
    """A learning-curve point (``train.eval_every``): the model after ``step`` updates, held-out scores."""

    step: int = opt(0, "optimiser steps done")
    samples: int | None = opt(
        None, "training samples (sentences) seen so far; null in a resumed run"
    )
    tokens: int | None = opt(
        None, "target tokens seen so far (sequence models); null in a resumed run or without tokens"
    )
    split: str = opt("dev", "the split scored: dev (translation) or eval (the evaluation split)")
    loss: float | None = opt(
        None, "mean loss (translation: NLL per target token of train.curve_limit sentences)"
    )
    accuracy: float | None = opt(None, "share of correct predictions (classifiers)")
    bleu: float | None = opt(None, "corpus BLEU of train.curve_limit sentences (translation)")
    by_language: dict[str, dict[str, Any]] | None = opt(
        None, "many->English (data.corpora): per source language its nll and bleu"
    )


@dataclass
class EnvInfo:
    """Where the numbers came from."""

    torch: str = opt("", "torch version")
    python: str = opt("", "Python version")
    host: str = opt("", "host name")
    git_commit: str | None = opt(
        None, "the project's commit (short hash; -dirty: tracked files had uncommitted changes)"
    )
    device_names: list[str] = opt(
        [], "the devices the ranks ran on (CPU model or CUDA device names)"
    )
    threads_per_rank: int | None = opt(None, "torch intra-op threads per rank")
    host_memory: list[str] = opt([], "each rank's host allocator setting in effect")
    launcher: str = opt("local", "local, torchrun, submitit or sim")
    cuda_devices: int = opt(
        0,
        "CUDA devices torch sees on the host that planned the run (device=auto and backend=auto "
        "resolve against it, once per sweep)",
    )
    nccl: dict[str, str] = opt(
        {}, "the NCCL_* environment in effect (NCCL_P2P_DISABLE=1: pipeline.nccl_p2p=false)"
    )


@dataclass
class ModelInfo:
    """The model as run: its option and its size."""

    name: str = opt("", "the model option (model=...)")
    param_count: int | None = opt(None, "parameters of the whole model")
    config: dict[str, Any] = opt({}, "the model's options")


@dataclass
class PipelineInfo:
    """The pipeline as run: every field comes from the run's validated config (no defaults here, so
    the config's defaults are stated once, in ``config.schema``)."""

    K: int = opt(doc="partitions")
    M: int = opt(doc="micro-batches")
    checkpoint: str = opt(doc="rematerialisation mode")
    schedule: str = opt(doc="schedule")
    balance: list[int] | None = opt(
        doc="layers per model cell as run, K*virtual_stages of them (null when the run failed "
        "before partitioning)"
    )
    balance_by: str | None = opt(
        doc="the per-layer cost the partition balanced; null when pipeline.balance gave the cells"
    )
    replicas: int = opt(doc="data-parallel replicas")
    virtual_stages: int = opt(1, "model cells per rank (v; the model is cut into K*v cells)")


@dataclass
class PlanInfo:
    """The run's plan, decided before it ran (``runplan.plan.RunPlan``)."""

    micro_batch: int = opt(0, "samples (or target tokens) per micro-batch and replica")
    planned_micro_batch: int = opt(
        0, "the micro-batch the memory was planned at (token batches: sentences of max_len)"
    )
    balance_cost: str = opt(
        "",
        "what the partition balanced and where the costs came from; a stand-in cost is named "
        "('flops standing in for time ...')",
    )
    memory_where: str = opt("", "the device memory the stages were planned against")
    memory_total_bytes: int = opt(0, "its total memory")
    memory_free_bytes: int = opt(0, "its free memory when the run was planned")
    memory_headroom_bytes: int = opt(
        0,
        "kept out of the budget: per GPU the CUDA context, NCCL buffers, cuBLAS workspaces, "
        "allocator rounding; per CPU rank its process",
    )
    memory_shared: bool = opt(False, "all ranks share the memory (a CPU host): stages add up")
    memory_budget_bytes: int = opt(0, "what the plan may use: min(total, free) - headroom")
    planned_stage_bytes: list[int] = opt(
        [], "each stage's planned peak: state + max(activations incl. sends, step temporaries)"
    )
    auto: AutoPlanInfo | None = opt(None, "plan=auto: the planner's pick and prediction; else null")


@dataclass
class ResumeInfo:
    """``train.resume``: what the run resumed from (``runner.resume``)."""

    save: str | None = opt(None, "the save resumed from; null: none was found, a fresh start")
    step: int = opt(0, "the save's step: the first step this run ran")
    corrupt: list[str] = opt(
        [], "newer saves passed over as corrupt, each why and where it is kept"
    )
    allowed: dict[str, list[Any]] = opt(
        {}, "options that differ from the save's, allowed by train.resume_allow: [save's, run's]"
    )


@dataclass
class PredictionInfo:
    """``train.predict``: the simulator's step time beside the measured one, and how busy the host
    was while the run measured it (``runner.predict``, ``metrics.hostload``)."""

    predicted_step_time_s: float = opt(
        0.0, "the simulator's step time for this run on this device's measured costs"
    )
    measured_step_time_s: float = opt(0.0, "the run's step_time_s")
    error: float = opt(
        0.0, "predicted / measured - 1 (negative: the run was slower than predicted)"
    )
    host_wait_share: float | None = opt(
        None,
        "the run's ranks' run-queue wait over their runnable time (schedstat); null: unknown",
    )
    host_busy: bool | None = opt(
        None,
        "host_wait_share at or above metrics.hostload.BUSY_WAIT_SHARE: the gap is the host's, "
        "not the simulator's; null: unknown",
    )
    note: str | None = opt(None, "the sentence the run's summary line adds when host_busy")


@with_config(ConfigDict(extra="forbid"))  # a key the contract lacks is refused, at every level
@dataclass
class RunMetrics:
    """One run (one Hydra job). Written also when the run fails or is interrupted."""

    status: str = opt(
        "ok",
        "ok, failed, interrupted (SIGINT/SIGTERM; what was measured so far is kept) "
        "or diverged (the loss became non-finite or exploded)",
        choices=STATUSES,
    )
    source: str = opt("measured", "measured by the engine, or simulated", choices=SOURCES)
    error: str | None = opt(None, "one-line message when status is not ok")
    model: ModelInfo | None = opt(None, "the model")
    data: dict[str, Any] | None = opt(None, "the dataset's options")
    pipeline: PipelineInfo | None = opt(None, "the pipeline as run")
    optim: dict[str, Any] | None = opt(None, "the optimiser's options")
    batch_size: int | None = opt(
        None, "the mini-batch N (as run: after train.batch_mode=fit chose it)"
    )
    batch_mode: str = opt(
        "fixed",
        "fixed (train.batch_size as given) or fit (the largest batch that fits "
        "the device memory at this K)",
    )
    steps: int | None = opt(None, "optimiser steps asked for")
    warmup_steps: int | None = opt(None, "steps excluded from step_time_s")
    seed: int | None = opt(None, "the run's seed")
    precision: str = opt(
        "fp32",
        "train.precision: fp32, or bf16 (autocast, fp32 master weights; "
        "activations and boundary transfers in bf16)",
        choices=PRECISIONS,
    )
    device: str | None = opt(None, "cpu or cuda")
    world_size: int | None = opt(None, "ranks: K * replicas")
    experiment: str | None = opt(None, "the experiment (conf/experiment/<name>.yaml)")
    losses: list[float | None] = opt(
        [], "the loss of every optimiser step run, full precision (null where it was not finite)"
    )
    step_time_s: float | None = opt(
        None, "median step time over the timed steps (slowest rank per step)"
    )
    step_times_s: list[float] = opt([], "every step's time (slowest rank)")
    throughput: float | None = opt(None, "samples per second, from step_time_s")
    tokens_per_s: float | None = opt(None, "tokens per second (sequence models)")
    bubble_fraction: float | None = opt(None, "measured share of stage time idle inside a step")
    bubble_ideal: float | None = opt(
        None,
        "the schedule's idle share with equal costs (engine.schedule.ideal_bubble): "
        "(K-1)/(M+K-1) for gpipe and 1f1b (GPipe §2.3); null where none is known",
    )
    predicted_step_time_s: float | None = opt(
        None,
        "train.predict: the step time the simulator predicts for "
        "this run on this device's measured costs (simulated)",
    )
    predicted_throughput: float | None = opt(None, "samples per second from predicted_step_time_s")
    prediction: PredictionInfo | None = opt(
        None, "train.predict: prediction against measurement and the host's load; else null"
    )
    host_wait_share: float | None = opt(
        None,
        "the share of their runnable time the ranks' threads waited for a core during the run "
        "(schedstat run-queue wait over wait + run, summed over every rank's threads); null: "
        "unknown (no /proc schedstat) or simulated",
    )
    stages: list[StageMetrics] = opt([], "one per stage")
    layer_costs: list[float] = opt([], "the per-layer costs the partition used")
    eval: EvalMetrics | None = opt(None, "evaluation after training, when it ran")
    curve: list[CurvePoint] = opt(
        [], "learning curve: a held-out score every train.eval_every steps (empty when 0)"
    )
    hardware: dict[str, Any] | None = opt(None, "the hardware profile of a simulated run")
    plan: PlanInfo | None = opt(None, "the run's plan (null when the run failed before it)")
    resume: ResumeInfo | None = opt(None, "train.resume: what the run resumed from; else null")
    env: EnvInfo = opt(EnvInfo(), "the environment")

    def to_dict(self) -> dict[str, Any]:
        """The run as JSON values (a loss that was not finite is null)."""
        return dump(self)


def to_json(m: RunMetrics) -> str:
    return json.dumps(m.to_dict(), indent=2, allow_nan=False, default=str)


def load_metrics(path: Path) -> RunMetrics:
    """Read a metrics.json back into its type (raises ValueError for a file that breaks the contract)."""
    return load(RunMetrics, json.loads(Path(path).read_text()))
