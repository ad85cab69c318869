"""Does this machine's speed drift, and does the speed probe follow a training step? A diagnostic.

    python bench/speed_drift.py [--seconds 60] [--model amoebanet] [--plot drift.png]

For ``--seconds`` it alternates the speed probe (``gpipe_repro.sim.measured.speed.probe_s``) and one
training step (forward, loss, backward) of a validation model at M = 1 in this one process, then
prints how far each moved (10th to 90th percentile), how closely they move together (Pearson's r),
and the step's spread with and without the probe's normalisation (by the median of the probes
around each step, as ``make validate-sim`` does per cell and round: coefficient of variation). With
``--plot`` it draws both over time. Nothing here is used by the simulator; the numbers say whether
``make validate-sim``'s speed normalisation is needed on a machine, and how much it removes. Run it
on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def _corr(a: list[float], b: list[float]) -> float:
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    va = sum((x - ma) ** 2 for x in a) ** 0.5
    vb = sum((y - mb) ** 2 for y in b) ** 0.5
    return cov / (va * vb) if va and vb else float("nan")


def _cv(xs: list[float]) -> float:
    return statistics.pstdev(xs) / statistics.fmean(xs)


def _p(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> None:
    from gpipe_repro.engine.hostmem import apply_host_memory
    from gpipe_repro.measure.models import MODELS, N
    from gpipe_repro.sim.measured.speed import normalized, probe_s, reference_s

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--model", choices=sorted(MODELS), default="amoebanet")
    ap.add_argument("--plot", default=None, help="write a PNG of both over time")
    a = ap.parse_args()
    if a.seconds <= 0:
        ap.error(f"--seconds={a.seconds} is invalid; allowed: a positive number")
    torch.set_num_threads(1)
    apply_host_memory("retain")
    vm = MODELS[a.model]
    layers = vm.layers(0)
    x, y = vm.sample(N)

    def step() -> None:
        z = x
        for layer in layers:
            z = layer(z)
        vm.loss(z, y).backward()

    for _ in range(3):  # warm-up
        step()
    ref = reference_s()
    at, probes, steps = [], [], []
    t_start = time.perf_counter()
    while time.perf_counter() - t_start < a.seconds:
        p = probe_s()
        t0 = time.perf_counter()
        step()
        steps.append(time.perf_counter() - t0)
        probes.append(p)
        at.append(t0 - t_start)
    # as make validate-sim does: by the median of the probes around a step (one probe is noisy;
    # the machine's phases last seconds)
    w = 3
    norm = [
        normalized(t, statistics.median(probes[max(0, i - w) : i + w + 1]), ref)
        for i, t in enumerate(steps)
    ]
    print(f"{len(steps)} steps of {a.model} (M = 1, one thread) over {a.seconds:.0f} s")
    print(
        f"probe: {1e3 * _p(probes, 0.1):.2f} .. {1e3 * _p(probes, 0.9):.2f} ms (10th..90th "
        f"percentile, x{_p(probes, 0.9) / _p(probes, 0.1):.2f})"
    )
    print(
        f"step:  {1e3 * _p(steps, 0.1):.1f} .. {1e3 * _p(steps, 0.9):.1f} ms "
        f"(x{_p(steps, 0.9) / _p(steps, 0.1):.2f})"
    )
    print(f"correlation of probe and step (Pearson): {_corr(probes, steps):.2f}")
    print(
        f"step's coefficient of variation: raw {_cv(steps):.1%}, normalised by the median of the "
        f"{2 * w + 1} probes around it {_cv(norm):.1%}"
    )
    if a.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(9, 3.5))
        ax.plot(at, [s / statistics.median(steps) for s in steps], label="step / its median")
        ax.plot(at, [p / statistics.median(probes) for p in probes], label="probe / its median")
        ax.plot(
            at, [s / statistics.median(norm) for s in norm], label="normalised step / its median"
        )
        ax.set_xlabel("seconds")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(a.plot, dpi=100)
        print(f"wrote {a.plot}")


if __name__ == "__main__":
    main()
