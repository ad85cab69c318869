"""One rank of one run: ``RankRun`` builds this stage from the run's plan, trains it, reports.

The same class runs in ``gpipe-run``'s own process (K = 1), in the ranks ``gpipe-run`` starts, under
``torchrun`` and as a SLURM task: rank and world size come from the environment (``init_topology``).
It has torchtitan's Trainer shape: its state is declared below; ``train()`` is a short loop that asks
small parts (``rank.parts``: saver, progress, stop vote, divergence check) after each step; the
evaluation comes from the model's task (``rank.evaluate``). Every decision about the run — micro-batch,
partition, memory — comes from the ``RunPlan`` it is handed; only ``balance_by=time`` is decided here,
by all ranks together from what they measure (``rank.balance``).
"""

from __future__ import annotations

import copy
import datetime
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ..config import RunConfig
from ..config.device import Device, device_for
from ..data import DataInfo, Dataset, get_data
from ..engine import Pipeline, Topology, chunk_slices, init_topology
from ..engine.checkpoint import stage_mode
from ..engine.memory import grad_bytes, optimizer_bytes, param_bytes
from ..engine.rng import derive_seed
from ..metrics.contract import CurvePoint, EvalMetrics
from ..metrics.hostload import Watch
from ..metrics.summary import RankResult, timed_from
from ..models import materialize
from ..optim import build_optimizer, lr_factor, set_lr
from ..runplan.plan import ModelPlan, RunPlan, plan_model
from ..save import describe_model
from .balance import time_balanced
from .evaluate import Evaluation, Trained, evaluation_for
from .parts import HEARTBEAT_DIR, DivergenceCheck, Progress, Saver, StopVote, heartbeat

__all__ = ["RankContext", "RankRun", "run_rank"]

# Events of this many last steps feed the measured bubble (a median over them); trace.json keeps
# train.trace_steps of them.
BUBBLE_STEPS = 8


@dataclass
class RankContext:
    """What a rank gets besides the plan: the run's folder and identity, and how it was started."""

    out_dir: Path | None = None
    run: str | None = None  # the run's id (its saves carry it; runner.folder keeps it)
    model: ModelPlan | None = None  # in-process (K = 1): the meta model the plan was made from
    gather: bool = False  # torchrun/SLURM: rank 0 gathers every rank's result
    ignore_sigint: bool = False  # ranks started by gpipe-run: Ctrl-C is the driver's to handle


class RankRun:
    """One rank's run: declared state, a short loop, small parts."""

    plan: RunPlan
    topo: Topology
    device: Device
    model: ModelPlan
    pipe: Pipeline
    opt: torch.optim.Optimizer
    data: Dataset | None  # only the first stage (inputs) and the last (targets) load data
    indices: list[int]  # the global index of each of this stage's layers (``pipe.layers``)
    saver: Saver
    progress: Progress | None  # on the rank that reports the loss
    vote: StopVote
    diverged: DivergenceCheck
    evaluation: Evaluation
    start: int  # the first step this process runs (> 0 after a resume)
    losses: list[float]  # every step's, those before a resume included (last stage)
    step_times: list[float]  # this process's steps
    samples: list[int]  # per step run: samples in the global mini-batch (last stage)
    tokens: list[int]  # per step run: target tokens in it (sequence models)
    stopped: bool
    peak_bytes: int | None  # the allocator's peak over the timed steps (CUDA)

    def __init__(self, spec: RunConfig, plan: RunPlan | None, ctx: RankContext) -> None:
        self.ctx = ctx
        torch.set_num_threads(spec.train.threads)
        if ctx.ignore_sigint:  # the driver turns Ctrl-C into a stop after the current step
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        p = spec.pipeline
        # several cells per rank send activations round a ring (the last stage feeds the first)
        self.topo = topo = init_topology(
            p.K, p.replicas, spec.device, p.timeout_s, ring=p.virtual_stages > 1
        )
        if ctx.ignore_sigint and ctx.out_dir is not None:  # let the driver see this rank is alive
            heartbeat(ctx.out_dir / HEARTBEAT_DIR / f"rank-{topo.rank}")
        # A CPU group of the run's own: the plan's exchange and the stop vote never queue behind
        # the pipeline's transfers, and its waits are bounded by pipeline.timeout_s.
        group = (
            dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=p.timeout_s))
            if topo.distributed
            else None
        )
        self.plan = _shared(plan, topo, group, ctx.gather)
        spec = self.plan.spec
        self.device = device_for(topo.device.type, topo.device.index or 0)
        self.model = ctx.model or plan_model(spec)
        if self.plan.measure_time:
            self.plan = time_balanced(self.plan, self.model, topo, self.device, group)
        self._build(group)

    # -------------------------------------------------------------------------------- build
    def _build(self, group: Any) -> None:
        spec, topo, model = self.plan.spec, self.topo, self.model
        v = spec.pipeline.virtual_stages
        slices = chunk_slices(self.plan.balance, topo.K, topo.stage)  # v cells, not adjacent
        # Only this stage's layers get memory; each is initialised from its global index, so the
        # weights (and the losses) are the same whatever K is. The plan's meta layers are copied,
        # never allocated in place: the plan is read again after the ranks (train.predict, eval).
        cells = [
            materialize(
                [copy.deepcopy(m) for m in model.layers[sl]], spec.seed, first_index=sl.start
            )
            for sl in slices
        ]
        self.pipe = Pipeline(
            cells[0] if v == 1 else cells,
            topo,
            M=spec.pipeline.M,
            schedule=spec.pipeline.schedule,
            checkpoint=stage_mode(spec.pipeline.checkpoint, topo.stage),
            loss_fn=model.model.loss_fn,
            loss_reduction=model.model.loss_reduction,
            host_memory=spec.pipeline.host_memory,
            precision=spec.train.precision,
            # every draw keyed by (seed, step, micro-batch, global layer): the same at any K; each
            # replica keys its own (its micro-batches hold other samples, so they get other masks)
            seed=derive_seed(spec.seed, topo.replica) if topo.replicas > 1 else spec.seed,
            first_layer=slices[0].start if v == 1 else [sl.start for sl in slices],
            virtual_stages=v,
        )
        self.indices = self.pipe.layer_indices
        self.opt = build_optimizer(self.pipe.parameters(), spec.optim)
        needs_data = topo.is_first or topo.is_last
        self.data = get_data(spec.data.name).build(spec.data) if needs_data else None
        options = {k: v for k, v in asdict(spec.model).items() if k != "name"}
        record = describe_model(spec.model.name, options, model.layers)
        self.saver = Saver(spec, topo, self.ctx.out_dir, self.ctx.run, record)
        self.start, self.losses = self.saver.restore(
            self.pipe.layers, self.indices, self.opt, len(model.layers)
        )
        reporter = topo.is_last and topo.replica == 0  # the rank that knows the loss speaks
        self.progress = Progress(spec, self.ctx.out_dir, self.start) if reporter else None
        self.vote = StopVote(topo, self.ctx.out_dir, group)
        self.diverged = DivergenceCheck(spec.optim.lr)
        self.evaluation = evaluation_for(spec, model)
        self.step_times, self.samples, self.tokens = [], [], []
        self.stopped, self.peak_bytes = False, None
        self.curve: list[CurvePoint] = []  # train.eval_every (reporter rank)

    # -------------------------------------------------------------------------------- train
    def train(self) -> None:
        """The loop: draw the batch, one step, then ask the parts."""
        spec, topo = self.plan.spec, self.topo
        t, p = spec.train, spec.pipeline
        batches = (
            self.data.batches(
                self.start,
                t.batch_size,
                spec.seed,
                multiple_of=p.M * p.replicas,
                need_inputs=topo.is_first,
            )
            if self.data is not None
            else None
        )
        warm = timed_from(spec, self.start)
        self.device.reset_peak()
        for step in range(self.start, t.steps):
            if step - self.start == warm:  # the peak of the timed steps, never an earlier run's
                self.device.reset_peak()
            self.vote.start()
            x, y = next(batches) if batches is not None else (None, None)  # outside the clock
            loss, dt = self._step(step, x, y)
            self.step_times.append(dt)
            if loss is not None:
                self._record(step, loss, dt, y)
            self.stopped = self.vote.stop()
            if self.saver.due(step + 1, self.stopped):  # collective: every rank, the same step
                self.saver.save(
                    step + 1,
                    self.pipe.layers,
                    self.indices,
                    self.plan.balance,
                    self.opt,
                    self.losses,
                )
            if self.stopped:
                break
            if t.eval_every and ((step + 1) % t.eval_every == 0 or step + 1 == t.steps):
                self._curve_point(step + 1)  # collective
        self.peak_bytes = self.device.peak_bytes()  # before evaluation allocates its own
        if self.progress is not None:
            self.progress.close()

    def _step(self, step: int, x: Any, y: Any) -> tuple[float | None, float]:
        spec, topo = self.plan.spec, self.topo
        t, R = spec.train, spec.pipeline.replicas
        self.device.synchronize()
        t0 = time.perf_counter()
        loss = self.pipe.train_step(
            _shard(x, topo.replica, R) if topo.is_first else None,
            _shard(y, topo.replica, R) if topo.is_last else None,
            step=step,  # a resumed run draws what an uninterrupted one would
        )
        set_lr(self.opt, spec.optim.lr * lr_factor(t.lr_schedule, step, t.steps, t.lr_warmup))
        self.opt.step()
        # Keep the .grad tensors allocated: the engine accumulates into them over the M micro-batches
        # of the next step, and DDP's reducer holds views of them in its buckets.
        self.opt.zero_grad(set_to_none=False)
        self.device.synchronize()
        return loss, time.perf_counter() - t0

    def _record(self, step: int, loss: float, dt: float, y: Any) -> None:
        self.losses.append(loss)
        n, tok = _counts(y, self.model.info)
        self.samples.append(n)
        if tok:
            self.tokens.append(tok)
        if self.progress is not None:
            self.progress.step(step, loss, dt, n, tok)
        self.diverged(step, self.losses)

    def _curve_point(self, step: int) -> None:
        """One learning-curve point (``train.eval_every``): the model after ``step`` updates scored
        on the held-out split. Every rank takes part; the reporter keeps the point. The training's
        random streams are restored afterwards, so the curve never changes the run, and the ranks
        meet before the next step, so no stage's step time counts the reporter's decoding."""
        with torch.random.fork_rng(devices=[]):
            ev = self.evaluation(self._trained(), True)
        if self.topo.distributed:
            dist.barrier()  # bounded by the process group's timeout (pipeline.timeout_s)
        if ev is None or not (self.topo.is_last and self.topo.replica == 0):
            return
        resumed = self.start > 0
        self.curve.append(
            CurvePoint(
                step=step,
                samples=None if resumed else sum(self.samples),
                tokens=None if resumed or not self.tokens else sum(self.tokens),
                split="dev" if ev.bleu is not None else "eval",
                loss=ev.loss,
                accuracy=ev.accuracy,
                bleu=ev.bleu,
                by_language={
                    k: {"nll": v["nll"], "bleu": v["bleu"]} for k, v in ev.by_language.items()
                }
                if ev.by_language
                else None,
            )
        )

    # -------------------------------------------------------------------------------- report
    def _trained(self) -> Trained:
        return Trained(self.plan.spec, self.topo, self.model, self.pipe, self.data, self.indices)

    def evaluate(self) -> EvalMetrics | None:
        if not self.plan.spec.train.eval or self.stopped:
            return None
        return self.evaluation(self._trained(), False)

    def result(self, ev: EvalMetrics | None) -> RankResult:
        spec, topo, pipe = self.plan.spec, self.topo, self.pipe
        ran = len(self.step_times)  # the recorder counts this process's steps from 0
        keep_from = max(
            timed_from(spec, self.start), ran - max(spec.train.trace_steps, BUBBLE_STEPS)
        )
        return RankResult(
            rank=topo.rank,
            stage=topo.stage,
            replica=topo.replica,
            balance=self.plan.balance,
            costs=self.plan.choice.costs,
            balance_cost=self.plan.choice.describe(),
            layer_names=[type(m).__name__ for m in pipe.layers],
            param_count=sum(q.numel() for q in pipe.parameters()),
            param_bytes=sum(param_bytes(cell) for cell in pipe.cells),
            grad_bytes=sum(grad_bytes(cell) for cell in pipe.cells),
            optimizer_bytes=optimizer_bytes(self.opt, pipe.parameters()),
            activation_bytes=pipe.peak_activation_bytes,
            allocator_peak_bytes=self.peak_bytes,
            losses=self.losses,
            step_times=self.step_times,
            samples=self.samples,
            tokens=self.tokens,
            first_step=self.start,
            stopped=self.stopped,
            events=[e.to_dict() for e in pipe.recorder.events if e.step >= keep_from],
            eval=ev,
            curve=self.curve,
            threads=torch.get_num_threads(),
            host_memory=pipe.host_memory,
            device_name=self.device.name(),
        )


def run_rank(spec: RunConfig, plan: RunPlan | None, ctx: RankContext) -> Any:
    """Run one rank. ``plan`` None: a rank of a torchrun/SLURM job other than 0, which receives rank
    0's plan. With ``ctx.gather`` rank 0 returns every rank's result (others None)."""
    rank = RankRun(spec, plan, ctx)
    watch = Watch()  # the host's load on this rank's threads over its steps
    watch.start()
    rank.train()
    sched = watch.stop()
    result = rank.result(rank.evaluate())
    result.sched = sched
    if ctx.gather and rank.topo.distributed:
        out: list[Any] | None = [None] * rank.topo.world_size if rank.topo.rank == 0 else None
        dist.gather_object(result, out, dst=0)
        return out
    return [result] if ctx.gather else result


# ------------------------------------------------------------------------------------ helpers
def _shared(plan: RunPlan | None, topo: Topology, group: Any, gather: bool) -> RunPlan:
    """Rank 0's plan on every rank of a torchrun/SLURM job (gpipe-run hands it to every rank)."""
    if gather and topo.distributed:
        box: list[Any] = [plan if topo.rank == 0 else None]
        dist.broadcast_object_list(box, src=0, group=group)
        plan = box[0]
    assert plan is not None, "a rank started without a plan must receive rank 0's"
    return plan


def _shard(x: Any, replica: int, replicas: int) -> Any:
    """This replica's share of a global batch (a tensor or a tuple of tensors)."""
    if x is None or replicas == 1:
        return x
    if isinstance(x, tuple):
        return tuple(_shard(t, replica, replicas) for t in x)
    n = x.shape[0] // replicas
    return x[replica * n : (replica + 1) * n]


def _counts(y: Any, info: DataInfo) -> tuple[int, int]:
    """Samples and target tokens of a global mini-batch, from its targets: translation targets
    ``(tgt, tokens)`` carry the token count (their batches are built by tokens); fixed-shape sequence
    targets hold ``seq_len`` tokens per sample."""
    if isinstance(y, tuple):
        return int(y[0].shape[0]), int(y[1][0])
    n = int(y.shape[0])
    return n, n * info.tokens_per_sample
