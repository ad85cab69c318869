"""The live record of a run: one JSON line per optimiser step, written by the last stage as it goes.

``progress.jsonl`` in the run's folder is how a run's numbers leave the ranks while it runs: the
process that owns the run (``gpipe-run``, or rank 0 under torchrun) follows it (``Follower``) to log
to wandb live and to show the run's progress on stderr (``ConsoleProgress``: a tqdm bar on a
terminal, else a line at most every few seconds — step / steps, loss, samples/s, ETA), and when a
run is interrupted or a rank dies, the steps it finished are still there (``read_progress``) for the
``interrupted`` metrics.json.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "StepRecord",
    "ProgressWriter",
    "Follower",
    "ConsoleProgress",
    "console_progress",
    "tee",
    "read_progress",
    "PROGRESS_FILE",
]

PROGRESS_FILE = "progress.jsonl"


@dataclass
class StepRecord:
    step: int
    loss: float | None  # None where the loss was not finite
    step_time_s: float  # this stage's wall time for the step, batch draw included
    samples_per_s: float
    tokens_per_s: float | None = None


class ProgressWriter:
    """Appends records; each line is flushed so a follower (or a post-mortem) sees it at once."""

    def __init__(self, path: Path, *, start_fresh: bool = True) -> None:
        self.path = path
        if start_fresh and path.exists():
            path.unlink()

    def write(self, rec: StepRecord) -> None:
        d = asdict(rec)
        if d["loss"] is not None and not math.isfinite(d["loss"]):
            d["loss"] = None
        with self.path.open("a") as f:
            f.write(json.dumps(d) + "\n")


def read_progress(path: Path) -> list[StepRecord]:
    """Every complete line (a torn last line from a killed writer is skipped)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(StepRecord(**json.loads(line)))
        except (json.JSONDecodeError, TypeError):
            continue
    return out


class Follower:
    """Calls ``on_record`` for each new line of ``path`` from a background thread, until ``stop``."""

    def __init__(
        self, path: Path, on_record: Callable[[StepRecord], Any], interval_s: float = 0.2
    ) -> None:
        self.path, self.on_record, self.interval_s = path, on_record, interval_s
        self._seen = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="progress-follower", daemon=True)

    def __enter__(self) -> Follower:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _poll(self) -> None:
        recs = read_progress(self.path)
        for rec in recs[self._seen :]:
            try:
                self.on_record(rec)
            except Exception:  # noqa: BLE001 - a logging failure must never stop the run
                pass
        self._seen = max(self._seen, len(recs))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._poll()

    def stop(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(timeout=5)
            self._poll()  # what arrived since the last poll


def _clock(seconds: float) -> str:
    s = max(0, round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class ConsoleProgress:
    """A run's progress on ``stream`` (stderr): a tqdm bar where it is a terminal; else one line at
    most every ``every_s`` seconds, ``K=2 M=4: step 120/500  loss 0.4123  812.4 samples/s  ETA
    0:00:47`` (the ETA from the median of the last steps' times). A follower's ``on_record``."""

    RECENT = 10  # steps the ETA's median time looks at

    def __init__(
        self,
        label: str,
        steps: int,
        every_s: float = 5.0,
        stream: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label, self.steps, self.every_s = label, steps, every_s
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.last = clock()  # the first line comes every_s after the start
        self.times: list[float] = []
        self.bar: Any = None
        if self.stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(
                total=steps, desc=label, unit="step", leave=False, file=self.stream, delay=1.0
            )

    def __call__(self, rec: StepRecord) -> None:
        self.times = [*self.times[-self.RECENT + 1 :], rec.step_time_s]
        done = rec.step + 1
        eta = _clock(statistics.median(self.times) * max(0, self.steps - done))
        loss = f"{rec.loss:.4f}" if rec.loss is not None else "nan"
        if self.bar is not None:
            self.bar.n = done
            self.bar.set_postfix_str(f"loss {loss}, {rec.samples_per_s:.1f} samples/s")
            return
        now = self.clock()
        if now - self.last < self.every_s or done >= self.steps:  # the last: the summary line
            return
        self.last = now
        print(
            f"{self.label}: step {done}/{self.steps}  loss {loss}  "
            f"{rec.samples_per_s:.1f} samples/s  ETA {eta}",
            file=self.stream,
            flush=True,
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def __enter__(self) -> ConsoleProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def console_progress(
    shown: bool, label: str, steps: int, every_s: float
) -> Iterator[ConsoleProgress | None]:
    """A run's progress on stderr while it runs (``shown``: ``train.progress``; the environment's
    GPIPE_PROGRESS=0: none, and None is yielded)."""
    if not shown or os.environ.get("GPIPE_PROGRESS", "1") == "0":
        yield None
        return
    with ConsoleProgress(label, steps, every_s) as c:
        yield c


def tee(*calls: Callable[[StepRecord], Any] | None) -> Callable[[StepRecord], None]:
    """One follower callback that calls each of ``calls`` in turn (None: skipped)."""

    def each(rec: StepRecord) -> None:
        for call in calls:
            if call is not None:
                call(rec)

    return each
