"""host_memory=retain: a steady-state CPU step stops page-faulting its activations back in.

Allocator settings are process-wide and permanent, so each case runs in a fresh interpreter.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import textwrap

import pytest
from torch import nn

from gpipe_repro.engine import Pipeline, single_process
from gpipe_repro.engine.hostmem import apply_host_memory, check_host_memory

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt settings are glibc's")

# Two Linear+ReLU layers on a 163840 x 64 batch: each activation is 40 MiB, above glibc's largest
# dynamic mmap threshold (32 MiB), so with the C library's defaults every one is mapped and unmapped.
_STEP_FAULTS = textwrap.dedent(
    """
    import json, resource, sys, torch
    from torch import nn
    from gpipe_repro.engine import Pipeline, single_process
    torch.set_num_threads(1)
    torch.manual_seed(0)
    layers = [nn.Sequential(nn.Linear(64, 64), nn.ReLU()) for _ in range(2)]
    pipe = Pipeline(layers, single_process(), M=1, checkpoint="never", track_memory=False,
                    loss_fn=lambda y, t: y.pow(2).mean(), host_memory=sys.argv[1])
    x = torch.randn(163840, 64)
    faults = []
    for _ in range(12):
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        pipe.train_step(x, None)
        for p in pipe.parameters():
            p.grad = None
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    print(json.dumps({"in_effect": pipe.host_memory, "faults": faults}))
    """
)


def _run(mode: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _STEP_FAULTS, mode], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@glibc
def test_retain_removes_steady_state_page_faults():
    system, retain = _run("system"), _run("retain")
    assert system["in_effect"] == "system" and retain["in_effect"] == "retain"
    pages_per_activation = (163840 * 64 * 4) // 4096
    # With the defaults every step faults all its large activations in again ...
    assert min(system["faults"][2:]) > 3 * pages_per_activation, system
    # ... with retain, once warm, a step reuses the memory freed by the ones before. (glibc may still
    # extend the heap now and then while it settles: the sum over the last five steps is compared.)
    assert sum(retain["faults"][-5:]) < 0.1 * sum(system["faults"][-5:]), (retain, system)


def test_bad_mode_one_line():
    with pytest.raises(
        ValueError, match=r"^host_memory='swap' is invalid; allowed: retain, system$"
    ):
        check_host_memory("swap")
    with pytest.raises(ValueError, match="host_memory='swap'"):
        Pipeline(
            [nn.Linear(2, 2)],
            single_process(),
            M=1,
            loss_fn=lambda y, t: y.sum(),
            host_memory="swap",
        )


def test_system_keeps_an_earlier_retain():
    # In this (test) process: once retained, asking for "system" reports what is really in effect.
    first = apply_host_memory("retain")
    assert apply_host_memory("system") == first
    if platform.libc_ver()[0] != "glibc":
        assert first.startswith("system (C library")


_FROZEN = textwrap.dedent(
    """
    import gc, json, sys
    from gpipe_repro.engine.hostmem import apply_host_memory
    before = gc.get_freeze_count()
    alive = [[i] for i in range(1000)]  # alive before the setting: frozen with retain
    apply_host_memory(sys.argv[1])
    frozen = gc.get_freeze_count()
    apply_host_memory(sys.argv[1])  # once per process
    later = [[i] for i in range(1000)]
    print(json.dumps({"before": before, "frozen": frozen, "again": gc.get_freeze_count(),
                      "tracked_later": gc.is_tracked(later[0])}))
    """
)


def _frozen(mode: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _FROZEN, mode], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_retain_keeps_the_objects_alive_at_set_up_out_of_the_collector():
    # A full collection during a step scanned every object torch's import made: several per step
    # at micro-batch 1 on AmoebaNet (forwards 5 -> 8.5 ms). retain freezes what is alive, once.
    retain, system = _frozen("retain"), _frozen("system")
    assert retain["before"] == 0 and retain["frozen"] > 1000, retain
    assert retain["again"] == retain["frozen"], retain  # a second call freezes nothing more
    assert retain["tracked_later"]  # objects made afterwards are collected as usual
    assert system["frozen"] == 0, system  # system leaves Python's collector alone
