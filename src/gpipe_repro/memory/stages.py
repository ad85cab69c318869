"""Per-stage memory of any model's flat layer list, planned without allocating (``memory.activations``).

The Table 1 planner (``memory.table1``) specialises this for the paper's two models; the simulated
backend uses it for every model: a stage's state (weights, gradients, optimiser slots) and its peak
activations under the schedule and remat mode (``memory.activations``), the largest layer alone (GPipe
§6: a single layer must fit on one accelerator), and the largest micro-batch that fits a budget —
activations are linear in the micro-batch, the state is not, so that last one is a closed form. In
bf16, autocast's weight copies are activation bytes that do not scale with the micro-batch
(``StagePlan.fixed_activation``), and so is the part of one micro-batch's working set that weight
gradients make (``memory.activations``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from ..engine.microbatch import Batch
from ..engine.pipeline import DEFAULT_LOOKAHEAD
from .activations import (
    MEASURE_DEVICE,
    StageActivation,
    measure_stage,
    peak_activation_bytes,
    state_bytes,
    step_temporary_bytes,
)

__all__ = ["StagePlan", "plan_stages", "layer_memory", "layer_activations"]

MEASURE_BATCH = 2  # samples the meta pass runs at; everything scales linearly from there


@dataclass(frozen=True)
class StagePlan:
    state: int  # bytes of weights + gradients + optimiser state
    activation: int  # peak activation bytes at the planned micro-batch
    per_sample: float  # activation bytes per sample of micro-batch (the linear part)
    # activation bytes that do not scale: autocast's weight copies (bf16), the working set's fixed part
    fixed_activation: int
    step: int = 0  # what opt.step() allocates besides the state, after the activations are freed

    @property
    def total(self) -> int:
        return self.state + max(self.activation, self.step)

    def at(self, micro_batch: int) -> int:
        """The stage's peak at another micro-batch (activations are linear in it, the rest is not)."""
        return self.state + max(
            round(self.per_sample * micro_batch) + self.fixed_activation, self.step
        )


class _Measured:
    """Per-layer and per-stage activations of one model at MEASURE_BATCH, memoised by layer range,
    and each layer's parameter count (``params``)."""

    def __init__(
        self,
        layers: Sequence[nn.Module],
        sample: Batch,
        loss: Callable[[Any], torch.Tensor],
        precision: str = "fp32",
        device_type: str = MEASURE_DEVICE,
    ) -> None:
        self.layers, self.loss, self.precision, self.device_type = (
            list(layers),
            loss,
            precision,
            device_type,
        )
        self.params = [sum(p.numel() for p in layer.parameters()) for layer in self.layers]
        self.inputs: list[Batch] = []
        x = sample
        for layer in self.layers:  # the input of every layer, once
            self.inputs.append(x)
            _, x = measure_stage(
                [layer], x, None, precision, device_type=device_type, working=False
            )

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - one instance per planned model
    def stage(self, start: int, end: int) -> StageActivation:
        last = end == len(self.layers)
        a, _ = measure_stage(
            self.layers[start:end],
            self.inputs[start],
            self.loss if last else None,
            self.precision,
            device_type=self.device_type,
        )
        return a


_MEASURED: dict[object, _Measured] = {}


def _measured(
    key: object,
    layers: Sequence[nn.Module],
    sample: Batch,
    loss: Callable[[Any], torch.Tensor],
    precision: str,
    device_type: str,
) -> _Measured:
    """One measurement per model (``key``), precision and device type in this process: a sweep over K
    and M measures it once."""
    if (key, precision, device_type) not in _MEASURED:
        _MEASURED[(key, precision, device_type)] = _Measured(
            layers, sample, loss, precision, device_type
        )
    return _MEASURED[(key, precision, device_type)]


def layer_activations(
    layers: Sequence[nn.Module],
    sample_fn: Callable[[int, str], Batch],
    loss: Callable[[Any], torch.Tensor],
    *,
    key: object,
    precision: str = "fp32",
    device_type: str = MEASURE_DEVICE,
) -> list[StageActivation]:
    """Each layer alone, per sample of micro-batch (the last one with the loss): the measurements
    ``plan_stages`` plans a one-layer stage from (memoised with its by ``key``)."""
    meas = _measured(key, layers, _example(sample_fn), loss, precision, device_type)
    return [meas.stage(i, i + 1).scaled(1 / MEASURE_BATCH) for i in range(len(layers))]


def _example(sample_fn: Callable[[int, str], Batch]) -> Batch:
    return sample_fn(MEASURE_BATCH, "meta")


def plan_stages(
    layers: Sequence[nn.Module],
    sample_fn: Callable[[int, str], Batch],
    loss: Callable[[Any], torch.Tensor],
    balance: Sequence[int],
    *,
    K: int,
    M: int,
    micro_batch: int,
    schedule: str,
    checkpoint: str | Sequence[str],
    optim: str = "rmsprop",
    key: object = None,
    precision: str = "fp32",
    device_type: str = MEASURE_DEVICE,
    weight_decay: float = 0.0,
    lookahead: int = DEFAULT_LOOKAHEAD,
    virtual_stages: int = 1,
) -> list[StagePlan]:
    """Every stage's state, peak activations (sent outputs a transfer still holds included) and the
    optimiser step's temporaries; ``checkpoint``: one remat mode, or one per stage (each stage is
    planned with its own); ``key`` names the model for memoisation; ``precision`` and
    ``device_type``: the activations as the engine keeps them there; ``lookahead``: how many
    actions ahead the engine posts its receives (``engine.pipeline.DEFAULT_LOOKAHEAD``).
    ``virtual_stages`` v: ``balance`` has K·v cells, stage k holds cells k, k+K, ... (its plan
    sums their state and walks its action list with each cell's bytes); one plan per stage."""
    v = virtual_stages
    if len(balance) != K * v:
        raise ValueError(
            f"balance has {len(balance)} cells for K={K} x virtual_stages={v}; allowed: {K * v}"
        )
    modes = [checkpoint] * K if isinstance(checkpoint, str) else list(checkpoint)
    if len(modes) != K:
        raise ValueError(
            f"checkpoint has {len(modes)} modes for {K} stages; allowed: one, or one per stage"
        )
    meas = (
        _measured(key, layers, _example(sample_fn), loss, precision, device_type)
        if key is not None
        else _Measured(layers, _example(sample_fn), loss, precision, device_type)
    )
    starts = [sum(balance[:s]) for s in range(len(balance))]
    opt = optim if optim in ("rmsprop", "sgd", "adam") else "rmsprop"
    out = []
    for k in range(K):
        cells = [(starts[s], starts[s] + balance[s]) for s in range(k, K * v, K)]
        acts = [meas.stage(a, b) for a, b in cells]
        params = sum(sum(meas.params[a:b]) for a, b in cells)
        # its state (its parameters', and the optimiser step's temporaries), then its activations
        # under its schedule and mode, walked with each of its cells' bytes
        state = state_bytes(params, opt)
        step = step_temporary_bytes(params, opt, weight_decay, device_type)
        units = [replace(a.scaled(1 / MEASURE_BATCH), weights=0, work_fixed=0) for a in acts]
        mode = modes[k]
        per = peak_activation_bytes(
            units, schedule, mode, K, M, k, lookahead=lookahead, virtual_stages=v
        )
        fixed = peak_activation_bytes(
            [StageActivation(0, 0, 0, a.weights, 0, a.work_fixed) for a in acts],
            schedule,
            mode,
            K,
            M,
            k,
            virtual_stages=v,
        )
        out.append(StagePlan(state, round(per * micro_batch) + fixed, float(per), fixed, step))
    return out


def layer_memory(
    layers: Sequence[nn.Module],
    sample_fn: Callable[[int, str], Batch],
    loss: Callable[[Any], torch.Tensor],
    *,
    M: int,
    micro_batch: int,
    schedule: str,
    checkpoint: str,
    optim: str = "rmsprop",
    key: object = None,
    precision: str = "fp32",
) -> list[int]:
    """Each layer alone on an accelerator (K = L would give): state + peak activations, bytes."""
    return [
        p.total
        for p in plan_stages(
            layers,
            sample_fn,
            loss,
            [1] * len(layers),
            K=len(layers),
            M=M,
            micro_batch=micro_batch,
            schedule=schedule,
            checkpoint=checkpoint,
            optim=optim,
            key=key,
            precision=precision,
        )
    ]
