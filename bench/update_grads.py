"""What the optimiser step costs as the profile takes it, against the ways it was taken before. A diagnostic.

    python bench/update_grads.py [--models mlp plainconv transformer imbalanced] [--M 4]
                                 [--repeats 9]

The simulator charges each layer ``update_s``: its optimiser step and the zeroing of its gradients
(RMSprop, the paper's optimiser, as a rank runs them: ``rank.run``). The profile now times them at
the end of each step of its stream (``sim.measured.stream``), on the gradients the step's backwards
left and in the caches they left. It used to time each layer's step apart, repeated on zero
gradients. ``bench/engine_vs_profile.py`` then found the engine's update far from the profile's on
every validation model. Per model, at one thread, the sum over its layers of one step and zeroing
(ms, median of ``--repeats``):

- *apart, zeros*: each layer's step repeated on zero gradients (the old way);
- *apart, a backward's*: the same on the gradients of a real backward of the model (so the values are
  right but the caches are warm: the layer's parameters, gradients and state were just touched);
- *in the stream*: the profile's ``update_s`` less its BatchNorm commit, summed over the layers
  (``time_stream``, M micro-batches of the validation's sample: the cell's one optimiser after a
  step's backwards, ``StreamTimes.update_shares``);
- *after a real step*: the whole model's optimiser step and zeroing right after a real forward and
  backward of its sample (as a K = 1 rank runs it; one optimiser, so no per-layer split).

Nothing here is used by the simulator. Run it on a quiet machine, under the CPU lock.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from gpipe_repro.measure.models import MODELS, N
from gpipe_repro.sim.measured.stream import fresh_input, time_stream


def _rmsprop(params: list[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.RMSprop(params, lr=1e-5)


def apart(layer: nn.Module, fill: Callable[[nn.Parameter], torch.Tensor], repeats: int) -> float:
    """One layer's step and zeroing, repeated, its gradients set by ``fill`` before each (untimed)."""
    params = [p for p in layer.parameters() if p.requires_grad]
    if not params:
        return 0.0
    grads = [fill(p) for p in params]
    for p, g in zip(params, grads, strict=True):
        p.grad = g.clone()
    opt = _rmsprop(params)
    times = []
    for r in range(2 + repeats):
        for p, g in zip(params, grads, strict=True):
            assert p.grad is not None
            p.grad.copy_(g)
        t0 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=False)
        if r >= 2:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _with_grads(layer: nn.Module) -> nn.Module:
    """A copy of ``layer`` holding its gradients (``copy.deepcopy`` leaves them out)."""
    out = copy.deepcopy(layer)
    for q, p in zip(out.parameters(), layer.parameters(), strict=True):
        q.grad = None if p.grad is None else p.grad.clone()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["mlp", "plainconv", "transformer", "imbalanced"],
                    choices=sorted(MODELS))  # fmt: skip
    ap.add_argument("--M", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(
        "model | apart, zeros ms | apart, a backward's ms | in the stream ms | after a real step ms"
    )
    for name in args.models:
        vm = MODELS[name]
        layers = vm.layers()
        x, y = vm.sample(N // args.M)
        model = nn.Sequential(*copy.deepcopy(layers))
        vm.loss(model(x), y).backward()
        zeros = sum(apart(copy.deepcopy(lay), torch.zeros_like, args.repeats) for lay in layers)
        backward = sum(apart(_with_grads(lay), lambda p: p.grad.clone(), args.repeats)
                       for lay in model)  # fmt: skip
        t = time_stream(
            layers,
            [fresh_input(x, False) for _ in range(args.M)],
            [y] * args.M,
            vm.loss,
            device=torch.device("cpu"),
            warmup=1,
            repeats=args.repeats,
            optimizer_fn=_rmsprop,
        )
        shares = t.update_shares()
        assert shares is not None
        stream = sum(shares)
        opt = _rmsprop(list(model.parameters()))
        after = []
        for r in range(2 + args.repeats):
            for _ in range(args.M):
                vm.loss(model(x), y).backward()
            t0 = time.perf_counter()
            opt.step()
            opt.zero_grad(set_to_none=False)
            if r >= 2:
                after.append(time.perf_counter() - t0)
        cells = (zeros, backward, stream, statistics.median(after))
        print(f"{name} | " + " | ".join(f"{1e3 * c:.3f}" for c in cells))


if __name__ == "__main__":
    main()
