"""One rank of one run: build this stage, train for the configured steps, measure, evaluate.

The same function runs under ``gpipe-run``'s local launcher, under ``torchrun`` and as a SLURM
task: rank and world size come from the environment. It returns a plain dict (the rank's share of
``metrics.json``); the runner merges the ranks' dicts.
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch
import torch.distributed as dist

from .config import OptimSpec, RunSpec
from .data import build_dataset
from .engine import (
    PartitionError,
    Pipeline,
    balance_by_cost,
    check_balance,
    init_topology,
    stage_slice,
)
from .engine.cost import layer_costs
from .engine.memory import grad_bytes, optimizer_bytes, param_bytes
from .engine.microbatch import split
from .engine.partition import check_k
from .errors import UserError
from .models import get_model

__all__ = ["run_rank", "build_optimizer", "choose_balance"]


def build_optimizer(params: Any, o: OptimSpec) -> torch.optim.Optimizer:
    if o.name == "rmsprop":  # the paper's optimiser (12 bytes per parameter with weights and grads)
        return torch.optim.RMSprop(params, lr=o.lr, alpha=o.alpha, eps=o.eps, momentum=o.momentum,
                                   weight_decay=o.weight_decay)
    if o.name == "sgd":
        return torch.optim.SGD(params, lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay)
    return torch.optim.Adam(params, lr=o.lr, betas=o.betas, eps=o.eps, weight_decay=o.weight_decay)


def choose_balance(spec: RunSpec, layers: list[torch.nn.Module], sample: Any) -> tuple[list[int], list[float]]:
    """The explicit balance, or the exact min-max partition of the chosen per-layer cost."""
    try:
        check_k(spec.pipeline.K, len(layers))
        costs = layer_costs(layers, sample, spec.pipeline.balance_by)
        if spec.pipeline.balance is not None:
            return check_balance(spec.pipeline.balance, len(layers)), costs
        return balance_by_cost(costs, spec.pipeline.K), costs
    except PartitionError as err:
        raise UserError(str(err)) from None


def _shard(x: Any, replica: int, replicas: int) -> Any:
    """This replica's share of a global batch (a tensor or a tuple of tensors)."""
    if isinstance(x, tuple):
        return tuple(_shard(t, replica, replicas) for t in x)
    n = x.shape[0] // replicas
    return x[replica * n : (replica + 1) * n]


def run_rank(spec: RunSpec, gather: bool = False) -> Any:
    """Run one rank. With ``gather`` (torchrun/SLURM) rank 0 returns every rank's dict, others None."""
    torch.set_num_threads(spec.train.threads)
    topo = init_topology(spec.pipeline.K, spec.pipeline.replicas, spec.device, spec.pipeline.timeout_s)
    result = _run(spec, topo)
    if gather and topo.distributed:
        out: list[Any] = [None] * topo.world_size if topo.rank == 0 else None  # type: ignore[assignment]
        dist.gather_object(result, out, dst=0)
        return out if topo.rank == 0 else None
    return [result] if gather else result


def _run(spec: RunSpec, topo: Any) -> dict:
    K, M, D = spec.pipeline.K, spec.pipeline.M, spec.pipeline.replicas
    model = get_model(spec.model)
    data = build_dataset(spec.data, spec.data_params)
    torch.manual_seed(spec.seed)
    layers = model.layers(data.info, spec.model_params)
    n_rep = spec.train.batch_size // D
    x0, _ = data.train_batch(0, n_rep, spec.seed)
    sample = split(x0, M)[0]
    # Measured costs differ between ranks: rank 0 decides, everyone follows.
    if topo.distributed and spec.pipeline.balance_by == "time":
        obj: list[Any] = [choose_balance(spec, layers, sample) if topo.rank == 0 else None]
        dist.broadcast_object_list(obj, src=0)
        balance, costs = obj[0]
    else:
        balance, costs = choose_balance(spec, layers, sample)
    sl = stage_slice(balance, topo.stage)
    mine = layers[sl]
    del layers
    pipe = Pipeline(mine, topo, M=M, schedule=spec.pipeline.schedule, checkpoint=spec.pipeline.checkpoint,
                    loss_fn=model.loss_fn, host_memory=spec.pipeline.host_memory)
    opt = build_optimizer(pipe.parameters(), spec.optim)
    dev = topo.device
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)

    show = spec.train.progress and topo.rank == topo.world_size - 1 and spec.train.steps > 1
    bar = None
    if show:
        from tqdm import tqdm

        bar = tqdm(total=spec.train.steps, desc=f"K={K} M={M}", unit="step", leave=False,
                   disable=os.environ.get("GPIPE_PROGRESS", "1") == "0")
    losses: list[float] = []
    step_times: list[float] = []
    for step in range(spec.train.steps):
        t0 = time.perf_counter()
        x = y = None
        if topo.is_first or topo.is_last:
            xb, yb = data.train_batch(step, spec.train.batch_size, spec.seed)
            x, y = _shard(xb, topo.replica, D), _shard(yb, topo.replica, D)
        loss = pipe.train_step(x if topo.is_first else None, y if topo.is_last else None)
        opt.step()
        opt.zero_grad(set_to_none=False)
        step_times.append(time.perf_counter() - t0)
        if loss is not None:
            if loss != loss:  # NaN
                raise UserError(f"the loss became NaN at step {step}; lower optim.lr={spec.optim.lr}")
            losses.append(loss)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.4f}")
    if bar is not None:
        bar.close()

    ev = _evaluate(spec, pipe, data, model, topo) if spec.train.eval else None
    W = spec.train.warmup_steps
    keep_from = max(W, spec.train.steps - max(spec.train.trace_steps, 8))
    events = [e.to_dict() for e in pipe.recorder.events if e.step >= keep_from]
    cuda_peak = torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else None
    return {
        "rank": topo.rank, "stage": topo.stage, "replica": topo.replica,
        "layers": balance[topo.stage], "balance": balance, "costs": costs,
        "layer_names": [type(m).__name__ for m in mine],
        "param_count": sum(p.numel() for p in pipe.parameters()),
        "param_bytes": param_bytes(pipe.cell), "grad_bytes": grad_bytes(pipe.cell),
        "optimizer_bytes": optimizer_bytes(opt, pipe.parameters()),
        "activation_bytes": pipe.peak_activation_bytes, "cuda_peak_bytes": cuda_peak,
        "losses": losses, "step_times": step_times, "events": events, "eval": ev,
        "threads": torch.get_num_threads(), "device": str(dev), "host_memory": pipe.host_memory,
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else _cpu_name(),
    }


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "cpu"


@torch.no_grad()
def _evaluate(spec: RunSpec, pipe: Pipeline, data: Any, model: Any, topo: Any) -> dict | None:
    """Accuracy and loss on the evaluation split, through the pipeline (running BN statistics).

    Every replica evaluates the whole split; the last batch is padded to a multiple of M and the
    padding is ignored."""
    es = data.eval_set()
    if es is None:
        return None
    xe, ye = es
    M = spec.pipeline.M
    B = max(M, spec.train.eval_batch_size // M * M)
    correct = total = 0
    loss_sum = 0.0
    for i in range(0, xe.shape[0], B):
        xb, yb = xe[i : i + B], ye[i : i + B]
        n = xb.shape[0]
        pad = (-n) % M
        if pad:
            xb = torch.cat([xb, xb[:1].expand(pad, *xb.shape[1:])])
        out = pipe.forward(xb if topo.is_first else None)
        if topo.is_last:
            out = out[:n].float().cpu()
            c, t = model.correct(out, yb)
            correct += c
            total += t
            loss_sum += float(model.loss_fn(out, yb)) * n
    if not topo.is_last:
        return None
    return {"accuracy": correct / max(total, 1), "loss": loss_sum / xe.shape[0], "samples": int(xe.shape[0])}

