"""What pipeline.host_memory=retain buys and costs: page faults per step and peak resident memory.

    make bench-hostmem           # writes reports/engine/hostmem.md (about 2 minutes)

Each case runs in fresh processes (malloc settings are per process) with ``system`` and ``retain``:
the engine benchmark's model (``gpipe_repro.benchmark``, K = 2, M = 1 and 8) and a two-layer model whose
activations are 40 MiB each (163840 x 64 floats, above glibc's largest dynamic mmap threshold), K = 1,
M = 1 and 4. Reported per rank: max resident set size (``ru_maxrss``) after the steps, and the median
of minor page faults per step over the last 10 steps.
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import statistics
from pathlib import Path

import torch
from torch import nn

from gpipe_repro.benchmark import ours_step
from gpipe_repro.engine import Pipeline, launch, single_process
from gpipe_repro.paper.provenance import Provenance


def _wide_step(M: int, host_memory: str):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    layers = [nn.Sequential(nn.Linear(64, 64), nn.ReLU()) for _ in range(2)]
    pipe = Pipeline(
        layers,
        single_process(),
        M=M,
        checkpoint="never",
        track_memory=False,
        loss_fn=lambda y, t: y.pow(2).mean(),
        host_memory=host_memory,
    )
    x = torch.randn(163840, 64)

    def step() -> None:
        pipe.train_step(x, None)
        for p in pipe.parameters():
            p.grad = None

    return step


def measure(K: int, model: str, M: int, host_memory: str, steps: int) -> tuple[float, float]:
    """(max RSS MiB, median faults per step over the last 10 steps) of this rank."""
    step = (
        ours_step(K, M, "never", host_memory)[0] if model == "conv" else _wide_step(M, host_memory)
    )
    faults = []
    for _ in range(steps):
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        step()
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, statistics.median(
        faults[-10:]
    )


CASES = [("conv", 2, 1), ("conv", 2, 8), ("wide", 1, 1), ("wide", 1, 4)]  # model, K, M
MODELS = {
    "conv": "engine benchmark's 9 conv3x3 @ 64 ch, batch 64",
    "wide": "2 x Linear(64, 64), batch 163840",
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="reports/engine")
    ap.add_argument("--steps", type=int, default=30)
    a = ap.parse_args()
    prov = dataclasses.replace(Provenance.here(), command="make bench-hostmem")
    lines = [
        "# host_memory: page faults and peak memory",
        "",
        "No claim of the paper is judged here, and no goal: what `pipeline.host_memory=retain` "
        "costs and saves (every claim of the paper: [the scorecard](../README.md)).",
        "",
        prov.page("")[-1],
        "",
        f"{a.steps} steps per case (`bench/hostmem.py`), fresh processes. "
        "Max RSS per rank (MiB); minor page faults per rank and step (median of the last 10 steps).",
        "",
        "| model | K | M | max RSS, system | max RSS, retain | change | faults/step, system | faults/step, retain |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for model, K, M in CASES:
        got = {
            hm: launch(measure, K, (K, model, M, hm, a.steps), threads=1)
            for hm in ("system", "retain")
        }
        for rank in range(K):
            (rs, fs), (rr, fr) = got["system"][rank], got["retain"][rank]
            label = MODELS[model] + (f", rank {rank}" if K > 1 else "")
            lines.append(
                f"| {label} | {K} | {M} | {rs:.0f} | {rr:.0f} | {(rr / rs - 1) * 100:+.1f}% | {fs:.0f} | {fr:.0f} |"
            )
        print(lines[-1], flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    prov.save(out, "hostmem.provenance.json")  # beside engine's: the CPU model, the commit
    (out / "hostmem.md").write_text("\n".join(lines) + "\n")
    print(f"report: {out / 'hostmem.md'}")


if __name__ == "__main__":
    main()
