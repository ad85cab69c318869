"""The small parts a rank's training loop asks after each step (``rank.run.RankRun.train``).

- ``Saver``: where the run's saves go, restoring from one (resume) or starting from one's weights
  (transfer), and writing one when it is due — collectively, every rank after the same step.
- ``Progress``: the live record (``progress.jsonl``, followed by the run's owner for wandb and the
  console, and kept for an interrupted run), on the rank that knows the loss.
- ``StopVote``: whether the run was told to stop (``STOP_FILE``), agreed by every rank for the same step.
- ``DivergenceCheck``: a loss that is not finite, or has grown 10^4-fold, ends the run as diverged.
- ``heartbeat``: a thread that shows the run's owner this rank is alive (``runner.guard.Watchdog``).
"""

from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..config import RunConfig
from ..engine import Topology
from ..errors import UserError
from ..metrics.progress import PROGRESS_FILE, ProgressWriter, StepRecord
from ..save import load, load_weights, resolve, run_of, save

__all__ = [
    "Saver",
    "Progress",
    "StopVote",
    "DivergenceCheck",
    "heartbeat",
    "DIVERGED",
    "STOP_FILE",
    "HEARTBEAT_DIR",
]

DIVERGED = "the loss diverged"
STOP_FILE = (
    "STOP"  # the owner of a run creates it in the run's folder to stop after the current step
)
HEARTBEAT_DIR = ".heartbeat"  # each rank touches <run>/.heartbeat/rank-<r> every second


def heartbeat(path: Path, interval_s: float = 1.0) -> None:
    """Touch ``path`` (holding this process's pid) every ``interval_s`` from a daemon thread. A stopped
    or frozen process stops touching it; the owner's watchdog notices (``runner.guard``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(str(os.getpid()))

    def beat() -> None:
        while True:
            try:
                os.utime(path)
            except OSError:
                return
            time.sleep(interval_s)

    threading.Thread(target=beat, name="heartbeat", daemon=True).start()


class Saver:
    """The run's saves: by global layer index, so they load at any K (``save``).

    ``run``: the id of the run (kept by its folder across resumes): ``resume=auto`` picks this run's
    newest save and pruning never touches another run's."""

    def __init__(
        self, spec: RunConfig, topo: Topology, folder: Path | None, run: str | None, record: Any
    ) -> None:
        t = spec.train
        self.spec, self.topo, self.run, self.record = spec, topo, run, record
        self.dir = Path(t.save_dir) if t.save_dir else (folder / "saves" if folder else None)
        if t.save_every > 0 and self.dir is None:
            raise UserError("train.save_every needs a folder: set train.save_dir")

    def restore(
        self,
        layers: list[nn.Module],
        indices: list[int],
        opt: torch.optim.Optimizer,
        n_layers: int,
    ) -> tuple[int, list[float]]:
        """Resume from a save (weights, optimiser, RNG, step, losses) or initialise from one (weights
        only, a fresh head). Comes after everything that draws random numbers, or the restored RNG
        streams would be overwritten. Returns the first step to run and the losses before it."""
        t = self.spec.train
        if t.resume is not None:
            where = self.dir if self.dir is not None else Path(".")
            path = resolve(t.resume, where, self.run if t.resume == "auto" else None)
            if path is None:  # auto and nothing saved yet: a fresh start
                return 0, []
            if self.run is None:  # a folder from before runs had ids: continue the save's run
                self.run = run_of(path)
            # train.resume_allow=[model]: the model's options may differ (the owner recorded how,
            # runner.resume); every tensor loaded must still match in key and shape
            record = None if "model" in t.resume_allow else self.record
            rep = load(path, layers, indices, optimizer=opt, model=record, topology=self.topo)
            return rep.step, list(rep.losses) if self.topo.is_last else []
        if t.init_from is not None:
            skip = t.init_skip if t.init_skip is not None else [n_layers - 1]
            load_weights(t.init_from, layers, indices, skip=skip, model=self.record)
        return 0, []

    def due(self, done: int, stopped: bool) -> bool:
        every, steps = self.spec.train.save_every, self.spec.train.steps
        return every > 0 and (done % every == 0 or done == steps or stopped)

    def save(
        self,
        done: int,
        layers: list[nn.Module],
        indices: list[int],
        balance: list[int],
        opt: torch.optim.Optimizer,
        losses: list[float],
    ) -> None:
        """Collective: every rank saves its layers after the same step."""
        assert self.dir is not None
        save(
            self.dir,
            done,
            layers,
            balance,
            self.topo,
            indices=indices,
            model=self.record,
            optimizer=opt,
            losses=losses,
            run_config=asdict(self.spec),
            keep=self.spec.train.save_keep,
            timeout_s=self.spec.pipeline.timeout_s,
            run=self.run,
        )


class Progress:
    """One record per step on the rank that reports the loss (``progress.jsonl``): the run's owner
    follows it and shows it (``metrics.progress.ConsoleProgress``: a bar or a line on stderr)."""

    def __init__(self, spec: RunConfig, folder: Path | None, start: int) -> None:
        # a resumed run appends to the record of the steps before it (an interrupted run's metrics)
        self.writer = (
            ProgressWriter(folder / PROGRESS_FILE, start_fresh=start == 0) if folder else None
        )

    def step(self, step: int, loss: float, dt: float, samples: int, tokens: int) -> None:
        if self.writer is not None:
            self.writer.write(
                StepRecord(step, loss, dt, samples / dt, tokens / dt if tokens else None)
            )

    def close(self) -> None:
        pass


class StopVote:
    """Whether the run was told to stop (``STOP_FILE``), agreed by every rank for the same step.

    Each step starts an all-reduce (max) of this rank's flag over the run's CPU group and reads the
    answer at the step's end, so the vote overlaps the step and every rank stops after the same one.
    In one process it is just a look at the file."""

    def __init__(self, topo: Topology, folder: Path | None, group: Any) -> None:
        self.topo, self.group = topo, group
        self.file = folder / STOP_FILE if folder is not None else None
        self.flag = torch.zeros(1, dtype=torch.int32)
        self.work: Any = None

    def _local(self) -> int:
        return int(self.file is not None and self.file.exists())

    def start(self) -> None:
        if self.topo.distributed:
            self.flag.fill_(self._local())
            self.work = dist.all_reduce(
                self.flag, op=dist.ReduceOp.MAX, group=self.group, async_op=True
            )

    def stop(self) -> bool:
        if not self.topo.distributed:
            return bool(self._local())
        self.work.wait()
        return bool(self.flag.item())


class DivergenceCheck:
    """Ends the run (the launcher stops the other ranks) when the loss is not finite or has grown
    10^4-fold over the first step's; the one line names the step and the learning rate."""

    GROWTH = 1e4

    def __init__(self, lr: float) -> None:
        self.lr = lr

    def __call__(self, step: int, losses: list[float]) -> None:
        loss, first = losses[-1], losses[0]
        if not math.isfinite(loss) or (
            len(losses) > 1 and loss > self.GROWTH * max(abs(first), 1.0)
        ):
            raise UserError(
                f"{DIVERGED} at step {step}: loss {loss:.4g} (first {first:.4g}); "
                f"lower optim.lr={self.lr}"
            )
