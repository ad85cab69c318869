"""What does the engine pay that the per-layer profile misses? K = 1 steps against their profile, action by action.

    python bench/engine_vs_profile.py [--models amoebanet transformer imbalanced] [--Ms 1 4 32]
                                      [--steps 6] [--json out.json]

The simulator composes a step from each layer's profiled cost (``sim.measured.profile_layers``, the
stream of a stage's micro-batches), the engine's overhead per action and per step
(``sim.measured.overhead``) and the optimiser step. On one process (K = 1) nothing else enters: no
link, no second rank. So a K = 1 step of the real engine splits into what each term should cover,
and each part is compared with its term:

- *inside the spans*: each forward, backward and recompute span of the engine (``engine.events``)
  against the sum of the profiled costs of the cell's layers at that micro-batch — the cache state
  between layers, the allocator, the engine's per-layer work (``cast_floats``, the keyed cell),
  whatever makes the same layers cost differently in the engine than in the stream;
- *outside the spans*: the step minus its spans and its optimiser step, against the calibrated
  per-action and per-step overheads (measured on a separate reference model);
- *the update*: ``optimizer.step()`` against the profile's ``update_s`` sum.

Every step and every profiled run is preceded by the speed probe (``sim.measured.speed``) and both are
put on the same reference speed, so the host's drift (which the probe shows: *speed* column) is
taken out of each ratio; the raw step against the raw profile is printed beside. Nothing here is used
by the simulator. Run it on a quiet machine, under the CPU lock.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import statistics
import time
from typing import Any

import torch

from gpipe_repro.engine import Pipeline, single_process
from gpipe_repro.engine.hostmem import apply_host_memory
from gpipe_repro.measure.models import N, model
from gpipe_repro.sim.measured import device_model, profile_layers
from gpipe_repro.sim.measured.speed import normalized, probe_s, reference_s


def _engine(name: str, M: int, checkpoint: str, steps: int, ref: float) -> dict[str, Any]:
    """``_engine_here`` in a fresh process, as a validation rank runs (its own collector state)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        return pool.apply(_engine_here, (name, M, checkpoint, steps, ref))


def _engine_here(name: str, M: int, checkpoint: str, steps: int, ref: float) -> dict[str, Any]:
    """K = 1 engine steps of ``name`` (as a validation rank runs them); per step, the seconds of
    its spans of each kind, the update, the remainder, the collector's, all on the reference
    speed."""
    torch.set_num_threads(1)
    apply_host_memory("retain")
    vm = model(name)
    layers = vm.layers()
    x, y = vm.sample(N)
    pipe = Pipeline(
        copy.deepcopy(layers), single_process(), M=M, loss_fn=vm.loss, checkpoint=checkpoint
    )
    opt = torch.optim.RMSprop(pipe.parameters(), lr=1e-5)
    rows: list[dict[str, float]] = []
    gc_s = [0.0, 0.0]  # seconds in the cyclic collector this step; when the current pass began

    def collector(phase: str, info: dict) -> None:
        if phase == "start":
            gc_s[1] = time.perf_counter()
        else:
            gc_s[0] += time.perf_counter() - gc_s[1]

    gc.callbacks.append(collector)
    for s in range(2 + steps):
        p = probe_s()
        gc_s[0] = 0.0
        t0 = time.perf_counter()
        pipe.train_step(x, y)
        t1 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=False)
        t2 = time.perf_counter()
        ev = [e for e in pipe.recorder.events if e.step == pipe.recorder.step - 1]
        if s < 2:
            continue
        spans = {
            k: sum(e.end - e.start for e in ev if e.action == k)
            for k in ("forward", "backward", "recompute")
        }
        row = {k: normalized(v, p, ref) for k, v in spans.items()}
        row["update"] = normalized(t2 - t1, p, ref)
        row["outside"] = normalized((t1 - t0) - sum(spans.values()), p, ref)
        row["step"] = normalized(t2 - t0, p, ref)
        row["step_raw"] = t2 - t0
        row["speed"] = ref / p
        row["collector"] = normalized(gc_s[0], p, ref)
        rows.append(row)
    gc.callbacks.remove(collector)
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["amoebanet", "transformer", "imbalanced"])
    ap.add_argument("--Ms", nargs="+", type=int, default=[1, 4, 32])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    torch.set_num_threads(1)
    apply_host_memory("retain")
    ref = reference_s()
    dm = device_model()
    out: list[dict[str, Any]] = []
    print(
        f"reference probe {ref * 1e3:.3f} ms; overhead {dm.overhead_s * 1e6:.1f} us/action, "
        f"{dm.step_overhead_s * 1e6:.0f} us/step"
    )
    print(
        "model M remat | speed | fwd span/profile | bwd span/profile | rec span/profile | "
        "outside ms (model ms) | update ms (profile ms) | step vs sum, normalised | raw"
    )
    for name in a.models:
        vm = model(name)
        sizes = sorted({N // M for M in a.Ms})
        prof = profile_layers(
            vm.layers(),
            vm.sample,
            sizes,
            loss_fn=vm.loss,
            repeats=a.repeats,
            use_cache=False,
            normalize_to=ref,
        )
        assert prof.raw is not None
        for M in a.Ms:
            n = N // M
            cs, raw = prof.costs[n], prof.raw[n]
            for ck in ("never", "always"):
                e = _engine(name, M, ck, a.steps, ref)
                remat = ck == "always"
                fwd = M * sum(c.forward_nograd_s if remat else c.forward_s for c in cs)
                bwd = M * sum(c.backward_s for c in cs)
                rec = M * sum(c.recompute for c in cs) if remat else 0.0
                upd = sum(c.update_s for c in cs)
                over = 2 * M * dm.overhead_s + dm.step_overhead_s
                over += M * prof.recompute_overhead_s if remat else 0.0
                total = fwd + bwd + rec + upd + over
                raw_total = (
                    M
                    * sum(
                        (c.forward_nograd_s if remat else c.forward_s)
                        + c.backward_s
                        + (c.recompute if remat else 0.0)
                        for c in raw
                    )
                    + sum(c.update_s for c in raw)
                    + over
                )
                row = {
                    "model": name,
                    "M": M,
                    "checkpoint": ck,
                    "micro_batch": n,
                    **e,
                    "profile_forward": fwd,
                    "profile_backward": bwd,
                    "profile_recompute": rec,
                    "profile_update": upd,
                    "model_outside": over,
                    "simulated": total,
                    "simulated_raw": raw_total,
                }
                out.append(row)
                rr = f"{e['recompute'] / rec:.3f}" if rec else "  -  "
                print(
                    f"{name} {M} {ck} | {e['speed']:.2f} | {e['forward'] / fwd:.3f} | "
                    f"{e['backward'] / bwd:.3f} | {rr} | {e['outside'] * 1e3:.2f} "
                    f"({over * 1e3:.2f}) | {e['update'] * 1e3:.2f} ({upd * 1e3:.2f}) | "
                    f"{total / e['step'] - 1:+.1%} | {raw_total / e['step_raw'] - 1:+.1%}"
                )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
