"""One rank of one run: build this stage, train it, report what it measured.

The same function runs in ``gpipe-run``'s own process (K = 1), in the ranks ``gpipe-run`` starts, under
``torchrun`` and as a SLURM task: rank and world size come from the environment (``init_topology``).
It reads straight through — build, train, report — and returns a ``RankResult``; the runner merges the
ranks' results into ``metrics.json``.
"""

from __future__ import annotations

import math
import os
import platform
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from .config import RunConfig
from .config.validate import engine_error
from .data import DataInfo, Dataset, get_data
from .engine import (
    ArgumentError,
    Pipeline,
    Topology,
    balance_by_cost,
    check_balance,
    init_topology,
    stage_slice,
)
from .engine.cost import COUNTED_KINDS, layer_costs
from .engine.memory import grad_bytes, optimizer_bytes, param_bytes
from .errors import UserError
from .metrics.progress import PROGRESS_FILE, ProgressWriter, StepRecord
from .metrics.summary import RankResult, timed_from
from .models import ModelSpec, get_model, materialize
from .optim import build_optimizer, lr_factor, set_lr
from .save import describe_model, load, load_weights, resolve, save

__all__ = ["Plan", "RankContext", "RankResult", "run_rank", "plan_model", "DIVERGED", "timed_from"]

# Events of this many last steps feed the measured bubble (a median over them); trace.json keeps
# train.trace_steps of them.
BUBBLE_STEPS = 8
DIVERGED = "the loss diverged"


@dataclass
class Plan:
    """The model as a plan: its layers on the meta device (no memory) and the data's shapes."""

    model: ModelSpec
    info: DataInfo
    layers: list[nn.Module]


def plan_model(spec: RunConfig) -> Plan:
    """Build the model on ``meta`` and check K and balance against its layers (UserError)."""
    model = get_model(spec.model.name)
    info = spec.data.info()
    with torch.device("meta"):
        layers = model.layers(info, spec.model)
    from .engine.partition import check_k

    try:
        check_k(spec.pipeline.K, len(layers))
        if spec.pipeline.balance is not None:
            check_balance(spec.pipeline.balance, len(layers))
    except ArgumentError as err:
        raise engine_error(err) from None
    return Plan(model, info, layers)


STOP_FILE = (
    "STOP"  # the owner of a run creates it in the run's folder to stop after the current step
)
HEARTBEAT_DIR = (
    ".heartbeat"  # each rank touches <run>/.heartbeat/rank-<r> every second (runner.guard)
)


@dataclass
class RankContext:
    """What a rank gets besides the spec: where the run's folder is, and (in-process) the plan."""

    out_dir: Path | None = None
    plan: Plan | None = None
    gather: bool = False  # torchrun/SLURM: rank 0 gathers every rank's result
    ignore_sigint: bool = False  # ranks started by gpipe-run: Ctrl-C is the driver's to handle

    @property
    def save_dir(self) -> Path | None:
        return self.out_dir / "saves" if self.out_dir is not None else None


def run_rank(spec: RunConfig, ctx: RankContext) -> Any:
    """Run one rank. With ``ctx.gather`` rank 0 returns every rank's result (others None)."""
    torch.set_num_threads(spec.train.threads)
    if ctx.ignore_sigint:  # the driver turns Ctrl-C into a stop after the current step (STOP_FILE)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    topo = init_topology(
        spec.pipeline.K, spec.pipeline.replicas, spec.device, spec.pipeline.timeout_s
    )
    if (
        ctx.ignore_sigint and ctx.out_dir is not None
    ):  # a rank of gpipe-run: let the driver see it is alive
        _heartbeat(ctx.out_dir / HEARTBEAT_DIR / f"rank-{topo.rank}")
    stage = _build(spec, topo, ctx.plan or plan_model(spec))
    start, past = _restore(spec, topo, stage, ctx)
    losses, step_times, stopped = _train(spec, topo, stage, ctx, start, past)
    result = _report(spec, topo, stage, losses, step_times, start, stopped)
    if ctx.gather and topo.distributed:
        out: list[Any] | None = [None] * topo.world_size if topo.rank == 0 else None
        dist.gather_object(result, out, dst=0)
        return out
    return [result] if ctx.gather else result


def _heartbeat(path: Path, interval_s: float = 1.0) -> None:
    """Touch ``path`` (holding this process's pid) every ``interval_s`` from a daemon thread. A stopped
    or frozen process stops touching it; the driver's watchdog notices (``runner.guard``)."""
    import threading

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(str(os.getpid()))

    def beat() -> None:
        while True:
            try:
                os.utime(path)
            except OSError:
                return
            time.sleep(interval_s)

    threading.Thread(target=beat, name="heartbeat", daemon=True).start()


# ------------------------------------------------------------------------------------------ build
@dataclass
class _Stage:
    plan: Plan
    pipe: Pipeline
    opt: torch.optim.Optimizer
    data: Dataset | None
    balance: list[int]
    costs: list[float]
    names: list[str]
    offset: int  # the global index of this stage's first layer
    record: dict[str, Any]  # the model as a save describes it
    samples: list[int] = field(default_factory=list)  # per step run (last stage)
    tokens: list[int] = field(default_factory=list)


def _balance(spec: RunConfig, topo: Topology, plan: Plan) -> tuple[list[int], list[float]]:
    """The explicit balance, or the exact min-max partition of the chosen per-layer cost."""
    p = spec.pipeline
    mb = spec.train.batch_size // p.replicas // p.M
    try:
        if p.balance_by in COUNTED_KINDS:  # counted on the meta layers: same on every rank
            costs = layer_costs(plan.layers, plan.info.example(mb, "meta"), p.balance_by)
        elif topo.rank == 0:  # measured on real copies; rank 0 decides, everyone follows
            real = materialize([_copy(m) for m in plan.layers], spec.seed)
            costs = layer_costs(real, plan.info.example(mb), p.balance_by)
        else:
            costs = []
        if topo.distributed and p.balance_by not in COUNTED_KINDS:
            box: list[Any] = [costs]
            dist.broadcast_object_list(box, src=0)
            costs = box[0]
        balance = list(p.balance) if p.balance is not None else balance_by_cost(costs, p.K)
    except ArgumentError as err:
        raise engine_error(err) from None
    return balance, costs


def _copy(m: nn.Module) -> nn.Module:
    import copy

    return copy.deepcopy(m)


def _build(spec: RunConfig, topo: Topology, plan: Plan) -> _Stage:
    balance, costs = _balance(spec, topo, plan)
    sl = stage_slice(balance, topo.stage)
    # Only this stage's layers get memory; each is initialised from its global index, so the
    # weights (and the losses) are the same whatever K is.
    mine = materialize(plan.layers[sl], spec.seed, first_index=sl.start)
    pipe = Pipeline(
        mine,
        topo,
        M=spec.pipeline.M,
        schedule=spec.pipeline.schedule,
        checkpoint=spec.pipeline.checkpoint,
        loss_fn=plan.model.loss_fn,
        loss_reduction=plan.model.loss_reduction,
        host_memory=spec.pipeline.host_memory,
        precision=spec.train.precision,
    )
    opt = build_optimizer(pipe.parameters(), spec.optim)
    # Only the first stage needs inputs and only the last needs targets: nobody else loads data.
    data = get_data(spec.data.name).build(spec.data) if topo.is_first or topo.is_last else None
    torch.manual_seed(spec.seed)  # the dropout streams
    record = describe_model(spec.model.name, _options(spec.model), plan.layers)
    return _Stage(
        plan, pipe, opt, data, balance, costs, [type(m).__name__ for m in mine], sl.start, record
    )


def _options(cfg: Any) -> dict[str, Any]:
    d = asdict(cfg)
    d.pop("name", None)
    return d


def _restore(
    spec: RunConfig, topo: Topology, st: _Stage, ctx: RankContext
) -> tuple[int, list[float]]:
    """Resume from a save (weights, optimiser, RNG, step, losses) or initialise from one (weights
    only, a fresh head). Comes after everything that draws random numbers, or the restored RNG
    streams would be overwritten. Returns the first step to run and the losses before it."""
    t = spec.train
    save_dir = _save_dir(spec, ctx)
    if t.resume is not None:
        if t.resume == "auto":  # the newest save of this run's folder, if any
            path = resolve(t.resume, save_dir) if save_dir is not None else None
        else:
            path = resolve(t.resume, save_dir if save_dir is not None else ".")
        if path is None:  # auto and nothing saved yet: a fresh start
            return 0, []
        rep = load(
            path,
            list(st.pipe.cell.layers),
            st.offset,
            optimizer=st.opt,
            model=st.record,
            topology=topo,
        )
        return rep.step, list(rep.losses) if topo.is_last else []
    if t.init_from is not None:
        skip = t.init_skip if t.init_skip is not None else [len(st.plan.layers) - 1]
        load_weights(t.init_from, list(st.pipe.cell.layers), st.offset, skip=skip, model=st.record)
    return 0, []


def _save_dir(spec: RunConfig, ctx: RankContext) -> Path | None:
    return Path(spec.train.save_dir) if spec.train.save_dir else ctx.save_dir


def _save(
    spec: RunConfig, topo: Topology, st: _Stage, ctx: RankContext, step: int, losses: list[float]
) -> None:
    d = _save_dir(spec, ctx)
    if d is None:
        raise UserError("train.save_every needs a folder: set train.save_dir")
    save(
        d,
        step,
        list(st.pipe.cell.layers),
        st.balance,
        topo,
        model=st.record,
        optimizer=st.opt,
        losses=losses,
        run_config=asdict(spec),
        keep=spec.train.save_keep,
        timeout_s=spec.pipeline.timeout_s,
    )


# ------------------------------------------------------------------------------------------ train
def _shard(x: Any, replica: int, replicas: int) -> Any:
    """This replica's share of a global batch (a tensor or a tuple of tensors)."""
    if x is None or replicas == 1:
        return x
    if isinstance(x, tuple):
        return tuple(_shard(t, replica, replicas) for t in x)
    n = x.shape[0] // replicas
    return x[replica * n : (replica + 1) * n]


class _StopVote:
    """Whether the run was told to stop (``STOP_FILE``), agreed by every rank for the same step.

    Each step starts an all-reduce (max) of this rank's flag and reads the answer at the step's end,
    so the vote overlaps the step and every rank stops after the same one. In one process it is just
    a look at the file."""

    def __init__(self, topo: Topology, ctx: RankContext) -> None:
        self.topo = topo
        self.file = ctx.out_dir / STOP_FILE if ctx.out_dir is not None else None
        self.flag = torch.zeros(1, dtype=torch.int32)
        self.work: Any = None
        # A group of its own (gloo, CPU): the vote never queues behind the pipeline's transfers.
        self.group = dist.new_group(backend="gloo") if topo.distributed else None

    def _local(self) -> int:
        return int(self.file is not None and self.file.exists())

    def start(self) -> None:
        if self.topo.distributed:
            self.flag.fill_(self._local())
            self.work = dist.all_reduce(
                self.flag, op=dist.ReduceOp.MAX, group=self.group, async_op=True
            )

    def stop(self) -> bool:
        if not self.topo.distributed:
            return bool(self._local())
        self.work.wait()
        return bool(self.flag.item())


def _train(
    spec: RunConfig, topo: Topology, st: _Stage, ctx: RankContext, start: int, past: list[float]
) -> tuple[list[float], list[float], bool]:
    t, p = spec.train, spec.pipeline
    reporter = topo.is_last and topo.replica == 0  # the rank that knows the loss speaks for the run
    progress = (
        ProgressWriter(ctx.out_dir / PROGRESS_FILE)
        if reporter and ctx.out_dir is not None
        else None
    )
    bar = _progress_bar(spec, start) if reporter else None
    batches = (
        st.data.batches(
            start, t.batch_size, spec.seed, multiple_of=p.M * p.replicas, need_inputs=topo.is_first
        )
        if st.data is not None
        else None
    )
    vote = _StopVote(topo, ctx)
    losses: list[float] = list(past)
    step_times: list[float] = []
    st.samples, st.tokens = [], []
    stopped = saved = False
    for step in range(start, t.steps):
        vote.start()
        # The timer covers drawing the batch: on the first and last stages it is part of a step's cost.
        t0 = time.perf_counter()
        x, y = next(batches) if batches is not None else (None, None)
        loss = st.pipe.train_step(
            _shard(x, topo.replica, p.replicas) if topo.is_first else None,
            _shard(y, topo.replica, p.replicas) if topo.is_last else None,
        )
        set_lr(st.opt, spec.optim.lr * lr_factor(t.lr_schedule, step, t.steps, t.lr_warmup))
        st.opt.step()
        # Keep the .grad tensors allocated: the engine accumulates into them over the M micro-batches
        # of the next step, and DDP's reducer holds views of them in its buckets.
        st.opt.zero_grad(set_to_none=False)
        dt = time.perf_counter() - t0
        step_times.append(dt)
        if loss is not None:
            losses.append(loss)
            n, tok = _counts(y, st.plan.info)
            st.samples.append(n)
            if tok:
                st.tokens.append(tok)
            if progress is not None:
                progress.write(StepRecord(step, loss, dt, n / dt, tok / dt if tok else None))
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.4f}")
            if not math.isfinite(loss) or (
                len(losses) > 1 and loss > 1e4 * max(abs(losses[0]), 1.0)
            ):
                # Ends the run (the other ranks are stopped by the launcher); reported as diverged.
                raise UserError(
                    f"{DIVERGED} at step {step}: loss {loss:.4g} (first {losses[0]:.4g}); "
                    f"lower optim.lr={spec.optim.lr}"
                )
        stopped = vote.stop()
        saved = t.save_every > 0 and (
            (step + 1) % t.save_every == 0 or step + 1 == t.steps or stopped
        )
        if saved:  # collective: every rank saves its layers after the same step
            _save(spec, topo, st, ctx, step + 1, losses)
        if stopped:
            break
    if bar is not None:
        bar.close()
    return losses, step_times, stopped


def _counts(y: Any, info: DataInfo) -> tuple[int, int]:
    """Samples and target tokens of a global mini-batch, from its targets: translation targets
    ``(tgt, tokens)`` carry the token count (their batches are built by tokens); fixed-shape sequence
    targets hold ``seq_len`` tokens per sample."""
    if isinstance(y, tuple):
        return int(y[0].shape[0]), int(y[1][0])
    n = int(y.shape[0])
    return n, n * info.tokens_per_sample


def _progress_bar(spec: RunConfig, start: int) -> Any:
    if (
        not spec.train.progress
        or spec.train.steps < 2
        or os.environ.get("GPIPE_PROGRESS", "1") == "0"
        or not sys.stderr.isatty()
    ):  # a bar is for a terminal; logs get the per-job summary line
        return None
    from tqdm import tqdm

    return tqdm(
        total=spec.train.steps,
        initial=start,
        desc=f"K={spec.pipeline.K} M={spec.pipeline.M}",
        unit="step",
        leave=False,
    )


# ------------------------------------------------------------------------------------------ report
def _report(
    spec: RunConfig,
    topo: Topology,
    st: _Stage,
    losses: list[float],
    step_times: list[float],
    start: int,
    stopped: bool,
) -> RankResult:
    ev = None
    if spec.train.eval and not stopped:
        ev = (
            _evaluate_translation(spec, topo, st) if _has_pairs(spec) else _evaluate(spec, topo, st)
        )
    ran = len(step_times)  # the recorder counts this process's steps from 0
    keep_from = max(timed_from(spec, start), ran - max(spec.train.trace_steps, BUBBLE_STEPS))
    dev = topo.device
    pipe = st.pipe
    return RankResult(
        rank=topo.rank,
        stage=topo.stage,
        replica=topo.replica,
        balance=st.balance,
        costs=st.costs,
        layer_names=st.names,
        param_count=sum(p.numel() for p in pipe.parameters()),
        param_bytes=param_bytes(pipe.cell),
        grad_bytes=grad_bytes(pipe.cell),
        optimizer_bytes=optimizer_bytes(st.opt, pipe.parameters()),
        activation_bytes=pipe.peak_activation_bytes,
        cuda_peak_bytes=torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else None,
        losses=losses,
        step_times=step_times,
        samples=st.samples,
        tokens=st.tokens,
        first_step=start,
        stopped=stopped,
        events=[e.to_dict() for e in pipe.recorder.events if e.step >= keep_from],
        eval=ev,
        threads=torch.get_num_threads(),
        host_memory=pipe.host_memory,
        device_name=torch.cuda.get_device_name(dev) if dev.type == "cuda" else cpu_name(),
    )


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def _has_pairs(spec: RunConfig) -> bool:
    """Whether the run's dataset is real parallel text (decoded and scored with BLEU)."""
    return spec.data.name == "translation"


def _evaluate_translation(spec: RunConfig, topo: Topology, st: _Stage) -> dict[str, Any] | None:
    """BLEU (greedy decoding) and NLL per target token on the test split. Decoding runs step by step
    with the whole model, so the stages' trained layers are gathered on the last stage of replica 0
    (by global index, as a save would hold them) and the model is evaluated there in one process."""
    from .translate import evaluate_translation

    reporter = topo.is_last and topo.replica == 0
    mine = {str(st.offset + i): layer.state_dict() for i, layer in enumerate(st.pipe.cell.layers)}
    parts: list[Any] = [mine]
    if topo.distributed:
        parts = [None] * topo.world_size
        dist.gather_object(
            mine if topo.replica == 0 else None, parts if reporter else None, dst=topo.K - 1
        )
    if not reporter:
        return None
    states = {int(k): v for part in parts if part for k, v in part.items()}
    layers = materialize([_copy(m) for m in st.plan.layers], spec.seed)
    for i, layer in enumerate(layers):
        layer.load_state_dict(states[i])
    assert st.data is not None
    with torch.no_grad():
        out = evaluate_translation(
            [m.eval() for m in layers],
            st.data,  # type: ignore[arg-type]  # data=translation: a TranslationDataset
            split="test",
            limit=spec.train.eval_limit,
        )
    return {
        "accuracy": None,
        "loss": out["nll"],
        "samples": out["bleu_sentences"],
        "bleu": out["bleu"],
        "bleu_signature": out["bleu_signature"],
        "by_language": out.get("by_language"),
    }


@torch.no_grad()
def _evaluate(spec: RunConfig, topo: Topology, st: _Stage) -> dict[str, Any] | None:
    """Accuracy and loss on the evaluation split, through the pipeline (running BN statistics).

    The split streams batch by batch (``Dataset.eval_batches``) on the first stage (inputs) and the
    last (labels); each batch is padded to a multiple of M and the padding ignored. Only the first
    stage knows how many samples come next, so it tells every rank before each batch (0: done).
    Every replica evaluates the whole split."""
    M = spec.pipeline.M
    B = max(M, spec.train.eval_batch_size // M * M)
    batches = st.data.eval_batches(B) if st.data is not None else iter(())
    correct = total = samples = 0
    loss_sum = 0.0
    while True:
        xb, yb = next(batches, (None, None))
        box = [0 if yb is None else int(yb.shape[0])]
        if topo.distributed:
            dist.broadcast_object_list(box, src=0)
        n = box[0]
        if n == 0:
            break
        out = st.pipe.forward(_pad(xb, (-n) % M) if topo.is_first else None)
        if topo.is_last:
            assert yb is not None and out is not None
            logits = out[:n].float().cpu()  # type: ignore[union-attr]
            c, t_ = st.plan.model.correct(logits, yb)
            correct, total, samples = correct + c, total + t_, samples + n
            loss_sum += float(st.plan.model.loss_fn(logits, yb)) * n
    if not topo.is_last or samples == 0:
        return None
    return {"accuracy": correct / max(total, 1), "loss": loss_sum / samples, "samples": samples}


def _pad(x: Any, pad: int) -> Any:
    if not pad:
        return x
    if isinstance(x, tuple):
        return tuple(_pad(t, pad) for t in x)
    return torch.cat([x, x[:1].expand(pad, *x.shape[1:])])
