"""Does Python's cyclic collector pause the engine's steps? A diagnostic for ``host_memory``.

    python bench/collector.py [--model amoebanet] [--M 32] [--rounds 4]

The layer profile (``sim/measured/stream.py``) and the engine (``engine/pipeline.py``) run the same
layers on the same micro-batches, yet a K = 1 step of the validation's AmoebaNet at M = 32 could take
far longer than its profile: a step builds and drops many Python objects, so the collector runs full
collections during steps, each scanning every object alive in the process (most of them torch's own).
``host_memory=retain`` freezes the objects alive at set-up out of the collector's reach
(``engine/hostmem.py``). Three processes, each a fresh interpreter (the setting is process-wide):

- ``system``: engine steps alone, the collector as Python leaves it;
- ``retain``: a stream profile of the same layers, then engine steps, alternating (as a process that
  profiles and trains does), the objects alive at set-up frozen;
- ``unfrozen``: the same alternation with ``gc.unfreeze()`` before each round's engine steps: what the
  collector then scans again.

Per round it prints the profile's and the engine's median forward per micro-batch and the full
collections counted during the engine's steps. Nothing here is used by the simulator. Run it on an
idle machine.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import statistics
import subprocess
import sys

import torch

from gpipe_repro.engine import Pipeline, single_process
from gpipe_repro.engine.hostmem import apply_host_memory
from gpipe_repro.measure.models import N, model
from gpipe_repro.sim.measured.stream import fresh_input, time_stream


def _one(mode: str, name: str, M: int, rounds: int) -> list[dict[str, float | None]]:
    torch.set_num_threads(1)
    apply_host_memory("system" if mode == "system" else "retain")
    vm = model(name)
    layers = vm.layers()
    x, y = vm.sample(N)
    xs, ys = vm.sample(N // M)
    pipe = Pipeline(
        copy.deepcopy(layers),
        single_process(),
        M=M,
        loss_fn=vm.loss,
        host_memory="system" if mode == "system" else "retain",
        checkpoint="never",
    )
    full = [0]

    def count(phase: str, info: dict) -> None:
        full[0] += phase == "start" and info["generation"] == 2

    gc.callbacks.append(count)
    out = []
    for _ in range(rounds):
        if mode == "system":
            profile = None
        else:
            t = time_stream(
                layers,
                [fresh_input(xs, False) for _ in range(M)],
                [ys] * M,
                vm.loss,
                device=torch.device("cpu"),
                warmup=1,
                repeats=2,
            )
            profile = 1e3 * statistics.median(t.actions("forward"))
            if mode == "unfrozen":
                gc.unfreeze()
        fw, before = [], full[0]
        for s in range(4):
            pipe.train_step(x, y)
            for p in pipe.parameters():
                p.grad = None
            ev = [e for e in pipe.recorder.events if e.step == pipe.recorder.step - 1]
            if s >= 1:
                fw.append(sum(e.end - e.start for e in ev if e.action == "forward") / M)
        out.append(
            {
                "profile_ms": profile,
                "engine_ms": 1e3 * statistics.median(fw),
                "full_collections": full[0] - before,
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="amoebanet")
    ap.add_argument("--M", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--mode", help=argparse.SUPPRESS)  # one setting, in this interpreter
    a = ap.parse_args()
    if a.mode:
        print(json.dumps(_one(a.mode, a.model, a.M, a.rounds)))
        return
    for mode in ("system", "retain", "unfrozen"):
        cmd = [sys.executable, __file__, "--mode", mode, "--model", a.model, "--M", str(a.M)]
        res = subprocess.run(
            [*cmd, "--rounds", str(a.rounds)], capture_output=True, text=True, timeout=600
        )
        if res.returncode:
            sys.exit(res.stderr)
        for i, r in enumerate(json.loads(res.stdout.strip().splitlines()[-1])):
            prof = "" if r["profile_ms"] is None else f"profile {r['profile_ms']:.2f} ms, "
            print(
                f"{mode} round {i + 1}: forward per micro-batch, {prof}engine "
                f"{r['engine_ms']:.2f} ms; full collections during the engine's steps: "
                f"{r['full_collections']}"
            )


if __name__ == "__main__":
    main()
