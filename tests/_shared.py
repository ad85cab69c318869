"""Helpers shared by the test files: gpipe-run as a subprocess (to its end, or started in a session of
its own to be signalled, with bounded waits), a make target run in a session of its own, a run's final weights read back from its save, a parallel
corpus written to a folder, a script of ``bench/`` imported as a module, and the skip of a network
test when the Debian archive cannot be reached."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pytest
import torch

from gpipe_repro.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
ENV = {**os.environ, "WANDB_MODE": "disabled", "GPIPE_PROGRESS": "0"}


def bench_module(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``bench/<name>.py`` imported as the module ``bench_<name>`` (for this test only)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, f"bench_{name}", mod)
    spec.loader.exec_module(mod)
    return mod


# A small K = 2 run with a final save (train.save_every larger than its steps: a save at the end
# only); the session's ``k2_run`` fixture (tests/conftest.py) runs it once through gpipe-run.
K2_RUN = [
    "pipeline.K=2",
    "pipeline.M=4",
    "pipeline.checkpoint=always",
    "train.steps=4",
    "train.warmup_steps=1",
    "train.eval_batch_size=500",
    "train.save_every=1000",
    "logger=none",
    "model.hidden=64",
    "model.depth=3",
]


def gpipe_run(
    *args: str, env: Mapping[str, str] | None = None, cwd: Path = ROOT, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``gpipe-run ARGS`` to its end (bounded by ``timeout``), its output captured."""
    return subprocess.run(
        [str(BIN / "gpipe-run"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**ENV, **(env or {})},
        cwd=cwd,
    )


def start(args: Sequence[str], cwd: Path) -> subprocess.Popen[str]:
    """``gpipe-run ARGS`` in a process group of its own (its pid is the group's id), as a terminal
    starts a command: ``os.killpg(proc.pid, SIGINT)`` is what Ctrl-C sends."""
    return subprocess.Popen(
        [str(BIN / "gpipe-run"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        cwd=cwd,
        start_new_session=True,
    )


def finish(
    proc: subprocess.Popen[str], bound: float, what: str = "the run"
) -> tuple[int, str, float]:
    """Wait at most ``bound`` seconds for ``proc``: (exit code, stderr, seconds); past the bound its
    whole group is killed and the test fails."""
    t0 = time.monotonic()
    try:
        _, err = proc.communicate(timeout=bound)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
        raise AssertionError(f"{what} still running after {bound:.0f} s") from None
    return proc.returncode, err, time.monotonic() - t0


def make(target: str, sweep_root: Path, bound: float, cwd: Path = ROOT) -> str:
    """``make -s TARGET SWEEP_ROOT=...`` in the repository, in a process group of its own: its stderr
    on success; past ``bound`` seconds the whole group (make and the runs it started) is killed and
    the test fails, so no run outlives the test."""
    proc = subprocess.Popen(
        ["make", "-s", target, f"SWEEP_ROOT={sweep_root}"],
        cwd=cwd,
        env={**os.environ, "WANDB_MODE": "disabled"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    code, err, _ = finish(proc, bound, f"make {target}")
    assert code == 0, err[-2000:]
    return err


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def steps_done(run: Path) -> int:
    """Steps a run has reported so far (its progress file)."""
    p = run / "progress.jsonl"
    return len(p.read_text().splitlines()) if p.exists() else 0


def group_left(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``."""
    left = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # state, ppid, pgrp
            left.append(int(d.name))
    return left


def final_weights(save: Path, overrides: Sequence[str]) -> dict[str, torch.Tensor]:
    """The weights and buffers of a save, by global key, loaded into the model ``overrides`` build
    (whatever the K that wrote it: a save is keyed by global layer)."""
    from gpipe_repro.config.compose import compose
    from gpipe_repro.models import materialize
    from gpipe_repro.runplan.plan import plan_model
    from gpipe_repro.save import load_weights
    from gpipe_repro.save.keys import layer_tensors

    spec = compose([a for a in overrides if not a.startswith("hydra.")], cuda_available=False)
    layers = materialize(plan_model(spec).layers, spec.seed)
    load_weights(save, layers, 0)
    return {k: t.clone() for k, t in layer_tensors(layers, 0).items()}


def same_tensors(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> bool:
    """The same keys, and every tensor equal bit for bit."""
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def write_corpus(
    root: Path, src: str, splits: Mapping[str, Sequence[tuple[str, str]]], tgt: str = "en"
) -> str:
    """A parallel corpus as the translation data reads one: ``<split>.<src>`` and ``<split>.<tgt>``,
    one sentence a line; the folder's path."""
    root.mkdir(parents=True, exist_ok=True)
    for split, pairs in splits.items():
        (root / f"{split}.{src}").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
        (root / f"{split}.{tgt}").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    return str(root)


@contextmanager
def archive_reachable() -> Iterator[None]:
    """Around a fetch from the Debian archive (a ``network`` test): when apt-get cannot get the
    package — no apt-get, no package lists, no network — the test skips, naming why; anything else
    (a bad package, a failed extraction) still fails it."""
    try:
        yield
    except UserError as err:
        if "`apt-get" in str(err):
            pytest.skip(f"the Debian archive cannot be reached from here: {err}")
        raise
