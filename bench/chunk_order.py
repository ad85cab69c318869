"""Does a rank that alternates two model cells compute them slower than one that runs them in turn? A diagnostic.

    python bench/chunk_order.py [--models amoebanet transformer imbalanced] [--M 8] [--stage 0]
                                [--repeats 7] [--json out.json]

``reports/sim/sim.md`` finds the real interleaved cells computing slower than their profile where
gpipe's and 1f1b's cells of the same models do not, and the committed data cannot tell the schedule
from the ring launch interleaved needs (issue #39). With ``interleaved`` and v = 2 a rank holds two
non-adjacent cells and alternates them (``engine.schedule.stage_actions``); the profile times each
layer in a stream of its own micro-batches (``sim.measured.profile``), and 1F1B runs one cell per
rank. So the same two cells' actions are timed here in one process (no link, no second rank, no
engine: plain autograd, one thread, freed memory kept mapped as a rank keeps it), in two orders:

- *in turn*: cell a's forwards and backwards in 1F1B's order, then cell b's (what the profile
  and a one-cell rank see);
- *interleaved*: the order interleaved 1F1B runs them on that rank.

Each cell's input is the real activation the cells before it produce from the model's sample (a
leaf that takes a gradient), the gradient of its output a fixed random tensor, the model's loss on
the last cell. The two orders alternate within each repeat; the medians of the summed forward and
backward seconds per order and their ratio are printed, per model. A ratio above 1 is what
alternating the cells costs on this host (cache and allocator state), which no profile charges.
Nothing here is used by the simulator. Run it on an idle machine, under the CPU lock.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from gpipe_repro.engine import balance_by_cost
from gpipe_repro.engine.hostmem import apply_host_memory
from gpipe_repro.engine.schedule import Action, stage_actions, virtual_stage
from gpipe_repro.measure.calibration import profile_model
from gpipe_repro.measure.models import MODELS, N, model

K, V = 2, 2


def _cells(name: str, M: int) -> tuple[list[nn.Sequential], list[torch.Tensor], Any, Any, list]:
    """The model's K·v cells (cut by cost as the validation cuts, on a profile taken here: 3
    repeats, not the validation's own, so the cut can differ from one run to the next), each
    cell's input for one micro-batch, the loss, its target, and the balance."""
    vm = model(name)
    prof = profile_model(name, [N], repeats=3, seed=0, ref=None)
    balance = balance_by_cost([c.forward_s + c.backward_s for c in prof.costs[N]], K * V)
    layers = vm.layers(0)
    cells, start = [], 0
    for b in balance:
        cells.append(nn.Sequential(*layers[start : start + b]))
        start += b
    x, y = vm.sample(N // M)
    inputs = []
    with torch.no_grad():
        for c in cells:
            inputs.append(x)
            x = c(x)
    return cells, inputs, vm.loss, y, balance


def _tensors(x: Any) -> list[torch.Tensor]:
    """The tensors of an activation: one, or a cell's tuple."""
    return [x] if isinstance(x, torch.Tensor) else [t for t in x if isinstance(t, torch.Tensor)]


def _leaf(x: Any, grad: bool) -> Any:
    """A fresh leaf of the activation ``x`` (taking a gradient where ``grad`` and it is a float)."""
    if isinstance(x, torch.Tensor):
        return x.detach().requires_grad_(grad and x.is_floating_point())
    return type(x)(_leaf(t, grad) for t in x)


def _run(
    order: Sequence[tuple[int, str, int]],
    cells: list[nn.Sequential],
    inputs: list[torch.Tensor],
    loss: Any,
    y: Any,
    grads: dict[int, tuple[torch.Tensor, ...]],
) -> dict[str, float]:
    """Seconds of the forwards and of the backwards of ``order`` ((cell, kind, micro-batch), F
    before its B)."""
    held: dict[tuple[int, int], torch.Tensor] = {}
    spent = {"F": 0.0, "B": 0.0}
    last = len(cells) - 1
    for c, kind, mb in order:
        t0 = time.perf_counter()
        if kind == "F":
            out = cells[c](_leaf(inputs[c], c > 0))
            held[(c, mb)] = loss(out, y) if c == last else out
        else:
            out = held.pop((c, mb))
            if c == last:
                out.backward()
            else:
                torch.autograd.backward(_tensors(out), list(grads[c]))
        spent[kind] += time.perf_counter() - t0
    for cell in cells:
        for p in cell.parameters():
            p.grad = None
    return spent


def orders(stage: int, M: int) -> dict[str, list[tuple[int, str, int]]]:
    """The two orders of this rank's cells' actions (module doc), as (cell, kind, micro-batch)."""
    mine = [virtual_stage(K, stage, c) for c in range(V)]  # the rank's model cells
    one = stage_actions("1f1b", K, M, stage)
    turn: list[tuple[int, str, int]] = [(cell, a.kind, a.mb) for cell in mine for a in one]
    inter: list[Action] = stage_actions("interleaved", K, M, stage, V)
    inter_order: list[tuple[int, str, int]] = [(mine[a.chunk], a.kind, a.mb) for a in inter]
    return {"in turn": turn, "interleaved": inter_order}


def measure(name: str, M: int, stage: int, repeats: int) -> dict[str, Any]:
    cells, inputs, loss, y, balance = _cells(name, M)
    with torch.no_grad():
        outs = [c(i) for c, i in zip(cells, inputs)]
    gen = torch.Generator().manual_seed(0)
    grads = {
        c: tuple(torch.randn(t.shape, generator=gen) for t in _tensors(o))
        for c, o in enumerate(outs)
    }
    ords = orders(stage, M)
    for o in ords.values():  # warm-up: one of each
        _run(o, cells, inputs, loss, y, grads)
    got: dict[str, list[dict[str, float]]] = {k: [] for k in ords}
    for r in range(repeats):
        names = list(ords) if r % 2 == 0 else list(ords)[::-1]
        for k in names:
            got[k].append(_run(ords[k], cells, inputs, loss, y, grads))
    med = {
        k: {kind: statistics.median(s[kind] for s in v) for kind in ("F", "B")}
        for k, v in got.items()
    }
    return {"model": name, "M": M, "stage": stage, "balance": balance, "seconds": med}


def line(r: dict[str, Any]) -> str:
    t, i = r["seconds"]["in turn"], r["seconds"]["interleaved"]
    both_t, both_i = t["F"] + t["B"], i["F"] + i["B"]
    return (
        f"{r['model']} | {r['balance']} | {both_t * 1e3:.1f} | {both_i * 1e3:.1f} | "
        f"{i['F'] / t['F']:.3f} | {i['B'] / t['B']:.3f} | {both_i / both_t:.3f}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["amoebanet", "transformer", "imbalanced"])
    ap.add_argument("--M", type=int, default=8, help="micro-batches per step (divides the batch)")
    ap.add_argument("--stage", type=int, default=0, help="the rank whose two cells are run")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    bad = (
        [f"--models {m!r} is unknown; allowed: {', '.join(MODELS)}" for m in a.models if m not in MODELS]
        + ([f"--M={a.M} is invalid; allowed: a multiple of {K} dividing the batch {N}"]
           if a.M < K or N % a.M or a.M % K else [])
        + ([f"--stage={a.stage} is invalid; allowed: 0 .. {K - 1}"] if not 0 <= a.stage < K else [])
        + ([f"--repeats={a.repeats} is invalid; allowed: >= 1"] if a.repeats < 1 else [])
    )  # fmt: skip
    if bad:
        print(f"chunk_order: error: {bad[0]}", file=sys.stderr)
        return 2
    torch.set_num_threads(1)  # as a rank runs: one thread, freed memory kept mapped
    apply_host_memory("retain")
    print("model | balance (K·v cells) | in turn ms | interleaved ms | F ratio | B ratio | ratio")
    out = []
    for name in a.models:
        r = measure(name, a.M, a.stage, a.repeats)
        print(line(r), flush=True)
        out.append(r)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
