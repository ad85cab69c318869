"""The run's config schema: one dataclass per section, each option's type, default and doc stated once.

Hydra composes ``conf/config.yaml`` over these (registered in ``config.store``); YAML files only choose
options and override values. The model, data and optimiser sections are the chosen option's own
dataclass (``models.MODELS``, ``data.DATASETS``, ``optim.OPTIMIZERS``). After validation
(``config.validate``) the same objects are the typed run spec the runner and the ranks receive: plain,
picklable dataclasses — config objects stop at the edge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING

from ..engine import CHECKPOINT_MODES, PRECISIONS, SCHEDULES
from ..engine.checkpoint import DEFAULT_CHECKPOINT
from ..engine.cost import COST_KINDS
from ..engine.hostmem import DEFAULT_HOST_MEMORY, HOST_MEMORY_MODES
from ..engine.schedule import DEFAULT_SCHEDULE
from ..optim import LR_SCHEDULES
from ..options import opt
from ..sim.hardware import HardwareConfig

__all__ = [
    "BACKENDS",
    "BATCH_MODES",
    "PipelineConfig",
    "TrainConfig",
    "LoggerConfig",
    "SweepConfig",
    "SimConfig",
    "PlanSearchConfig",
    "AutoPlanConfig",
    "PLAN_MODES",
    "RunConfig",
    "DEVICES",
    "LOGGERS",
    "WANDB_MODES",
    "RESUME_ALLOW",
]

DEVICES = ("auto", "cpu", "cuda")
BACKENDS = ("engine", "sim", "auto")
BATCH_MODES = ("fixed", "fit")
LOGGERS = ("wandb", "none")
WANDB_MODES = ("offline", "online", "disabled")
RESUME_ALLOW = ("batch_size", "data", "model")  # what train.resume_allow may list


@dataclass
class PipelineConfig:
    """GPipe itself (paper §2): K cells, M micro-batches, the schedule, rematerialisation."""

    K: int = opt(1, "partitions (cells), one rank each", min=1)
    M: int = opt(1, "micro-batches per mini-batch; must divide train.batch_size / replicas", min=1)
    checkpoint: Any = opt(
        DEFAULT_CHECKPOINT,
        "rematerialisation (paper §2.3; torchgpipe's name): one mode for every stage, or a list of "
        "one mode per stage, e.g. [never,always]",
        allowed=f"{', '.join(CHECKPOINT_MODES)}, or a list of K of them",
    )
    schedule: str = opt(
        DEFAULT_SCHEDULE,
        "gpipe = fill-drain (the paper's); 1f1b = PipeDream-flush; interleaved = Megatron-LM's "
        "interleaved 1F1B over pipeline.virtual_stages cells per rank (bubble / v, M a multiple "
        "of K); zb-h1 = zero bubble's ZB-H1 (Qi et al. 2024: each backward split into the input "
        "gradient B and the weight gradient W, W deferred into the bubble); README, Schedules",
        choices=SCHEDULES,
    )
    virtual_stages: int = opt(
        1,
        "model cells per rank (v): the model is cut into K*v cells, cell s on rank s mod K "
        "(interleaved: >= 2; zb-h1: 1, or more for torch's interleaved zero bubble; gpipe, "
        "1f1b: 1)",
        min=1,
    )
    balance: list[int] | None = opt(
        None,
        "layers per cell, e.g. [3,5]; null = exact min-max partition by balance_by",
        allowed="null or a list of K*virtual_stages layer counts, each >= 1",
    )
    balance_by: str = opt("params", "per-layer cost the partition balances", choices=COST_KINDS)
    replicas: int = opt(1, "data-parallel copies of the pipeline (world size K * replicas)", min=1)
    timeout_s: float = opt(300.0, "bound on every wait between ranks", min=1)
    heartbeat_s: float = opt(
        30.0,
        "a rank silent this long (stopped, frozen) is named and the run stopped; 0 = off",
        min=0,
    )
    nccl_p2p: bool = opt(
        True,
        "false: NCCL_P2P_DISABLE=1 for the ranks (and the link measurement), so GPUs exchange "
        "through host memory, not NVLink or PCIe peer-to-peer: Table 3's 'without NVLink'",
    )
    host_memory: str = opt(
        DEFAULT_HOST_MEMORY,
        "retain: CPU ranks keep freed memory between steps (no page-fault "
        "churn); system: leave malloc alone",
        choices=HOST_MEMORY_MODES,
    )


@dataclass
class TrainConfig:
    """The training loop."""

    batch_size: int = opt(64, "the mini-batch N (global: split over pipeline.replicas)", min=1)
    micro_batch_size: int | None = opt(
        None,
        "grow the mini-batch through M: when set, train.batch_size "
        "becomes pipeline.M * pipeline.replicas * this (samples, or target "
        "tokens for data=translation); null = train.batch_size",
        min=1,
    )
    batch_mode: str = opt(
        "fixed",
        "fixed: train.batch_size as given; fit: the largest multiple of "
        "pipeline.M * replicas whose every stage fits the device memory at this K (the "
        "paper's Table 2: 'adjusted to fit memory'; planned on the meta device; "
        "backend=sim)",
        choices=BATCH_MODES,
    )
    steps: int = opt(50, "optimiser steps", min=1)
    warmup_steps: int | None = opt(
        None,
        "steps excluded from step_time_s; null = min(5, (steps - 1) // 2)",
        min=0,
        allowed="null or an integer in 0..steps-1",
    )
    threads: int = opt(1, "torch intra-op threads per rank", min=1)
    precision: str = opt(
        "fp32",
        "fp32, or bf16: autocast with fp32 master weights, gradients and optimiser "
        "state; activations kept and sent between stages in bf16 (half the bytes)",
        choices=PRECISIONS,
    )
    eval: bool = opt(True, "evaluate on the held-out split after training")
    eval_batch_size: int = opt(256, "evaluation batch (rounded down to a multiple of M)", min=1)
    eval_limit: int | None = opt(
        None, "translation: test sentences decoded for BLEU (NLL uses all); null = all", min=1
    )
    eval_every: int = opt(
        0,
        "learning curves: every N steps (and after the last) score the model on the held-out "
        "split — translation: NLL and BLEU of curve_limit dev sentences (per language for a mix); "
        "others: the evaluation split — into metrics.json's curve; 0 = never",
        min=0,
    )
    curve_limit: int | None = opt(
        100,
        "translation: the first N dev sentences (of each language for a mix) a curve point scores, "
        "NLL and BLEU; null = all",
        min=1,
    )
    progress: bool = opt(
        True,
        "show the run's progress on stderr (step / steps, loss, samples/s, ETA): a bar on a "
        "terminal, else a line every progress_every_s; env GPIPE_PROGRESS=0 turns it off too",
    )
    progress_every_s: float = opt(
        5.0, "seconds between progress lines when stderr is not a terminal (a log)", min=0
    )
    trace_steps: int = opt(2, "steps kept in trace.json", min=1)
    lr_schedule: str = opt(
        "constant",
        "the learning rate over the steps: constant, cosine decay to 0, or rsqrt "
        "(the Transformer's inverse square root decay; a function of the step alone) — "
        "each after lr_warmup linear warm-up steps",
        choices=LR_SCHEDULES,
    )
    lr_warmup: int = opt(0, "linear learning-rate warm-up steps", min=0)
    save_every: int = opt(
        0,
        "write a save (weights, optimiser, step, RNG, losses) every N steps and at "
        "the end; 0 = never",
        min=0,
    )
    save_dir: str | None = opt(None, "where saves go; null = <the run's folder>/saves")
    save_keep: int | None = opt(3, "keep the newest N saves; null = all", min=1)
    resume: str | None = opt(
        None,
        "continue from a save: a save folder, a folder of saves, or auto (this run's "
        "newest in save_dir; a fresh start when there is none; a finished run stays as it is)",
    )
    resume_allow: list[str] = opt(
        [],
        "what a resume may change from the save's run (else refused: the losses would mix two "
        "runs): batch_size (train.batch_size), data (seed and the data options: the data order), "
        "model (the model's options); what differed is recorded in metrics.json's resume",
        allowed=f"a list of {', '.join(RESUME_ALLOW)}",
    )
    overwrite: bool = opt(
        False,
        "start afresh in a folder holding a run's results (else refused: resume it, or use a "
        "new folder); the old run's saves are kept and never resumed from",
    )
    init_from: str | None = opt(
        None,
        "initialise the weights from a save (transfer learning), except the layers of init_skip",
    )
    init_skip: list[int] | None = opt(
        None,
        "global layer indices init_from leaves freshly initialised; "
        "null = the last layer (the classifier: a new head)",
    )
    memory_check: bool = opt(
        True,
        "refuse, before allocating, a run whose planned memory exceeds the "
        "device's (each GPU, or this host's RAM)",
    )
    predict: bool = opt(
        False,
        "engine runs: also simulate the run on this device's measured costs "
        "(hardware=measured) and report the predicted step time beside the measured one, "
        "with the host's load during the run (metrics.json: prediction)",
    )
    stop_grace_s: float = opt(
        60.0,
        "after SIGINT/SIGTERM, how long to wait for the current step (and "
        "save) before stopping at once",
        min=0,
    )

    @property
    def timed_from(self) -> int:
        """The first step whose time counts (``warmup_steps``, resolved)."""
        return self.warmup_steps if self.warmup_steps is not None else min(5, (self.steps - 1) // 2)


@dataclass
class LoggerConfig:
    """wandb, offline by default (online mode hangs without a network); ``wandb sync`` uploads later."""

    name: str = opt("wandb", "wandb or none", choices=LOGGERS)
    project: str = opt("gpipe-repro", "wandb project")
    mode: str = opt(
        "${oc.env:WANDB_MODE,offline}",
        "offline | online | disabled (env WANDB_MODE wins)",
        choices=WANDB_MODES,
    )
    group: str | None = opt(None, "wandb group; null = the experiment, else the sweep folder")
    name_format: str = opt("K{K}-M{M}", "run name, formatted with the pipeline's fields")


@dataclass
class SweepConfig:
    """How ``gpipe-run -m`` treats a sweep folder."""

    skip_done: bool = opt(
        False,
        "re-run a sweep into its folder: jobs with an ok metrics.json are skipped; the others "
        "follow train.resume / train.overwrite (a job folder holding results is refused without)",
    )
    publish: bool = opt(
        True,
        "an experiment's make target (gpipe-run -m experiment=NAME, nothing else) copies its report "
        "to reports/NAME/; false: the report stays in the sweep's folder (make demo; make "
        "demo-publish publishes)",
    )


@dataclass
class SimConfig:
    """How ``backend=sim`` times a run on ``hardware=measured``: each distinct layer profiled on this device
    (cached per model and sizes, so a sweep profiles once)."""

    profile_max_micro_batch: int = opt(
        64,
        "layers are profiled at the powers of two up to this micro-batch; "
        "larger micro-batches keep the per-sample cost of the largest (per-sample cost is "
        "not constant below it: measure up to the micro-batches a sweep uses)",
        min=1,
    )
    profile_repeats: int = opt(5, "timed repeats per layer and size (their median)", min=1)
    profile_stream: int | None = opt(
        None,
        "calls in a row each layer is timed in; null = the run's M, at most 8 (as a stage runs "
        "them); a paper-size model sets 1, so that one profile serves every M of a sweep",
        min=1,
    )


PLAN_MODES = ("manual", "auto")


@dataclass
class PlanSearchConfig:
    """What the planner (``gpipe-plan``, ``plan=auto``) searches under (issue #19)."""

    devices: int | None = opt(
        None,
        "accelerators the pipeline may use (K * replicas <= devices); null = what the launcher "
        "would use: this host's CUDA devices, or on a CPU host one rank per train.threads cores",
        min=1,
    )
    memory_gib: float | None = opt(
        None,
        "memory cap per device, GiB; null = the device's (the engine's budget, a CPU host's "
        "shared between the ranks) or the hardware profile's (backend=sim)",
        min=0.001,
    )
    max_m: int = opt(64, "largest number of micro-batches searched", min=1)


@dataclass
class AutoPlanConfig(PlanSearchConfig):
    """``plan=auto``: the pipeline options (K, replicas, M, schedule, per-stage remat, balance)
    are the planner's best configuration for this run, chosen before it starts."""

    mode: str = opt(
        "manual",
        "manual: the pipeline.* options as given; auto: the planner's pick for the run's model, "
        "data, hardware, precision and train.batch_size (pipeline.* must then be left unset)",
        choices=PLAN_MODES,
    )


@dataclass
class RunConfig:
    """The root: one run (one Hydra job)."""

    model: Any = MISSING
    data: Any = MISSING
    optim: Any = MISSING
    hardware: HardwareConfig = opt(
        HardwareConfig(),
        "the device a simulated run is timed on: a published profile "
        "(conf/hardware/*.yaml) or measured (this device, cached)",
    )
    pipeline: PipelineConfig = opt(PipelineConfig())
    train: TrainConfig = opt(TrainConfig())
    logger: LoggerConfig = opt(LoggerConfig())
    sweep: SweepConfig = opt(SweepConfig())
    sim: SimConfig = opt(SimConfig())
    plan: AutoPlanConfig = opt(
        AutoPlanConfig(), "plan=auto: the pipeline options chosen by the planner (gpipe-plan)"
    )
    seed: int = opt(0, "seeds weights (per layer), data order and dropout", min=0)
    device: str = opt(
        "auto",
        "auto = cuda where this host has a CUDA device for each of its ranks (for every job of "
        "a sweep), else cpu",
        choices=DEVICES,
    )
    backend: str = opt(
        "engine",
        "engine = run the pipeline and measure; sim = simulate it on the hardware "
        "profile (nothing allocated); auto = engine where the host has a CUDA device for each "
        "of its ranks, else sim — decided once for a whole sweep, at its largest "
        "K*replicas, so a series is never part measured, part simulated (metrics.json: source)",
        choices=BACKENDS,
    )
    experiment_name: str | None = opt(
        None, "set by conf/experiment/*.yaml; names reports/<experiment_name>/"
    )

    @property
    def world_size(self) -> int:
        return self.pipeline.K * self.pipeline.replicas
