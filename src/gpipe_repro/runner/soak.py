"""``make soak``: a long run interrupted again and again, resumed each time, against one never touched.

    python -m gpipe_repro.runner.soak --out reports/soak            # >= 20 minutes, >= 10 faults
    python -m gpipe_repro.runner.soak --minutes 1 --faults 3 --out DIR   # the short version

A K = 2 ``gpipe-run`` with dropout and saves runs once uninterrupted (the reference), then again in
another folder while faults land at random moments (a seeded RNG): SIGINT and SIGTERM to the run's
owner (it stops after the current step and saves), SIGKILL of a random rank, and SIGKILL of a random
rank while a save is being written (its ``save-<step>.tmp-*`` folder exists). After each fault the
same command is started again with ``train.resume=auto``. At the end the faulted run's per-step
losses and its final save's tensors (weights, buffers, optimiser state) must be bit-identical to the
reference's. ``soak.md`` and ``soak.json`` list every fault: its kind, when it landed (seconds into
the attempt, the step the run had reached), how the attempt ended, how long until the resumed run
finished a step again, and what was lost (the steps since the last complete save).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["Fault", "soak", "main", "KINDS"]

KINDS = ("sigint", "sigterm", "sigkill-rank", "sigkill-in-save")
ARGS = [
    "pipeline.K=2",
    "pipeline.M=2",
    "model=mlp",
    "model.hidden=256",
    "model.depth=6",
    "model.dropout=0.2",
    "data=digits",
    "train.batch_size=32",
    "train.eval=false",
    "train.save_keep=2",
    "train.progress=false",
    "pipeline.heartbeat_s=10",
    "logger=none",
]
EXIT_BOUND_S = 120  # an interrupted attempt must be gone within this (else the soak fails)


@dataclass
class Fault:
    kind: str
    attempt: int
    at_s: float  # seconds into the attempt
    step: int  # steps the run had finished when it landed
    exit_code: int | None
    saved_step: int  # the newest complete save after the attempt ended
    lost_steps: int  # steps finished but not saved: run again after the resume
    recovery_s: float | None = None  # from the fault to the resumed run's first finished step


class _Progress:
    """The run's live record (``progress.jsonl``, kept across resumes), read as it grows."""

    def __init__(self, run: Path) -> None:
        self.path, self.pos, self.lines, self.done = run / "progress.jsonl", 0, 0, 0
        self.steps: set[int] = set()

    def read(self) -> _Progress:
        if self.path.exists():
            with self.path.open("rb") as f:
                f.seek(self.pos)
                chunk = f.read()
            complete = chunk[: chunk.rfind(b"\n") + 1]  # a torn last line waits for its end
            self.pos += len(complete)
            for line in complete.splitlines():
                try:
                    self.steps.add(int(json.loads(line)["step"]))
                except (ValueError, KeyError, TypeError):
                    continue
                self.lines += 1
            while self.done in self.steps:
                self.done += 1
        return self


def _newest_save(run: Path) -> int:
    saves = [
        int(p.name.split("-")[1])
        for p in (run / "saves").glob("save-*")
        if (p / "COMPLETE").is_file() and p.name.split("-")[1].isdigit()
    ]
    return max(saves, default=0)


def _start(bindir: Path, args: list[str], run: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "WANDB_MODE": "disabled", "GPIPE_PROGRESS": "0"}
    return subprocess.Popen(
        [str(bindir / "gpipe-run"), *args, f"hydra.run.dir={run}"],
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


def _wait(proc: subprocess.Popen[bytes], bound_s: float) -> int:
    try:
        return proc.wait(timeout=bound_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise RuntimeError(
            f"soak: an attempt was still running {bound_s:.0f} s after its fault"
        ) from None


def _rank_pid(run: Path, rng: random.Random) -> int:
    beats = sorted((run / ".heartbeat").glob("rank-*"))
    return int(rng.choice(beats).read_text().strip())


def _until(
    cond: Any, bound_s: float, what: str, proc: subprocess.Popen[bytes], poll_s: float = 0.01
) -> None:
    t0 = time.monotonic()
    while not cond():
        if proc.poll() is not None:
            raise RuntimeError(f"soak: the run ended while waiting for {what}")
        if time.monotonic() - t0 > bound_s:
            raise RuntimeError(f"soak: timed out after {bound_s:.0f} s waiting for {what}")
        time.sleep(poll_s)


def _writing(run: Path) -> set[str]:
    try:
        return {e.name for e in os.scandir(run / "saves") if ".tmp-" in e.name}
    except OSError:
        return set()


def _inject(kind: str, proc: subprocess.Popen[bytes], run: Path, rng: random.Random) -> None:
    if kind == "sigint":
        proc.send_signal(signal.SIGINT)
    elif kind == "sigterm":
        proc.send_signal(signal.SIGTERM)
    else:
        if kind == "sigkill-in-save":  # a save is being written: a new temporary folder exists
            stale = _writing(run)  # left by an earlier fault's crashed write
            _until(lambda: bool(_writing(run) - stale), 600, "a save", proc, poll_s=0.0005)
        os.kill(_rank_pid(run, rng), signal.SIGKILL)


def _tensors(save: Path) -> dict[str, Any]:
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    with tempfile.TemporaryDirectory() as tmp:
        dcp_to_torch_save(save, Path(tmp) / "state.pt")
        return dict(torch.load(Path(tmp) / "state.pt", weights_only=False))


def _identical(a: Path, b: Path) -> bool:
    import torch

    ta, tb = _tensors(a), _tensors(b)
    return ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta)


def soak(out: Path, minutes: float, faults: int, seed: int, work: Path) -> dict[str, Any]:
    """Run the soak; its record (also written to ``out``)."""
    bindir = Path(sys.executable).parent
    rng = random.Random(seed)
    log = out / "soak.log"
    out.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    # calibrate: the steps that make the uninterrupted run last ``minutes``
    probe = work / "probe"
    t_all = t0 = time.monotonic()
    if _wait(_start(bindir, [*ARGS, "train.steps=20"], probe, log), 1800) != 0:
        raise RuntimeError(f"soak: the calibration run failed (see {log})")
    step_s = statistics.median(json.loads((probe / "metrics.json").read_text())["step_times_s"])
    steps = max(4 * faults + 8, round(minutes * 60 / step_s))
    every = max(2, steps // (4 * faults))
    args = [*ARGS, f"train.steps={steps}", f"train.save_every={every}"]
    reference = work / "reference"
    t0 = time.monotonic()
    if _wait(_start(bindir, args, reference, log), 24 * 3600) != 0:
        raise RuntimeError(f"soak: the reference run failed (see {log})")
    ref_s = time.monotonic() - t0
    run = work / "faulted"
    # every kind in turn, a kill during a save's write first (so even 3 faults include one)
    kinds = [KINDS[(i - 1) % len(KINDS)] for i in range(faults)]
    rng.shuffle(kinds)
    record: list[Fault] = []
    progress = _Progress(run)
    proc = _start(bindir, args, run, log)
    started = time.monotonic()
    for i, kind in enumerate(kinds):
        # a random moment: some steps into this attempt, leaving room for the faults to come
        before = progress.read().done
        room = max(1, (steps - before) // (len(kinds) - i + 1))
        target = before + rng.randint(1, room)
        _until(lambda t=target: progress.read().done >= t, 3600, f"step {target}", proc)
        time.sleep(rng.uniform(0, step_s))  # anywhere inside a step, not at its boundary
        _inject(kind, proc, run, rng)
        at = time.monotonic()
        step = progress.read().done
        code = _wait(proc, EXIT_BOUND_S)
        saved = _newest_save(run)
        step = max(step, progress.read().done)  # a stop finishes the step it was in
        record.append(
            Fault(kind, i, round(at - started, 2), step, code, saved, max(0, step - saved))
        )
        seen = progress.read().lines
        proc = _start(bindir, [*args, "train.resume=auto"], run, log)
        started = time.monotonic()
        _until(lambda n=seen: progress.read().lines > n, 3600, "the resumed run's first step", proc)
        record[-1].recovery_s = round(time.monotonic() - at, 2)
    code = _wait(proc, 24 * 3600)
    ref_m = json.loads((reference / "metrics.json").read_text())
    run_m = json.loads((run / "metrics.json").read_text())
    final = f"save-{steps}"
    envs = [m.get("env", {}) for m in (ref_m, run_m)]
    result = {
        "wall_s": round(time.monotonic() - t_all, 1),
        # where the numbers came from: both runs' commit, host and torch (one value each, or both)
        **{
            k: "/".join(sorted({str(e.get(k)) for e in envs}))
            for k in ("git_commit", "host", "torch", "threads_per_rank")
        },
        "command": "python -m gpipe_repro.runner.soak "
        + " ".join(f"--{k} {v}" for k, v in (("minutes", minutes), ("faults", faults))),
        "args": args,
        "steps": steps,
        "save_every": every,
        "reference_s": round(ref_s, 1),
        "final_exit_code": code,
        "status": run_m["status"],
        "losses_identical": run_m["losses"] == ref_m["losses"] and len(ref_m["losses"]) == steps,
        "parameters_identical": _identical(reference / "saves" / final, run / "saves" / final),
        "faults": [asdict(f) for f in record],
    }
    (out / "soak.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "soak.md").write_text(markdown(result))
    return result


def markdown(r: dict[str, Any]) -> str:
    ok = r["losses_identical"] and r["parameters_identical"] and r["status"] == "ok"
    lines = [
        "# Soak: a run interrupted and resumed, against one never interrupted",
        "",
        f"Generated by `{r['command']}` (host {r['host']}; threads per rank "
        f"{r['threads_per_rank']}; torch {r['torch']}; commit {r['git_commit']}; "
        f"{r['wall_s'] / 60:.1f} min in all): {r['steps']} steps, a save every {r['save_every']}; "
        f"the uninterrupted run took {r['reference_s']} s. Per-step losses identical: "
        f"**{r['losses_identical']}**; final parameters and optimiser state identical: "
        f"**{r['parameters_identical']}**; final status {r['status']}. "
        + ("PASS." if ok else "FAIL."),
        "",
        "| # | fault | at (s into the attempt) | at step | attempt's exit | newest save "
        "| steps lost | recovery (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for i, f in enumerate(r["faults"]):
        lines.append(
            f"| {i + 1} | {f['kind']} | {f['at_s']} | {f['step']} | {f['exit_code']} | "
            f"{f['saved_step']} | {f['lost_steps']} | {f['recovery_s']} |"
        )
    lost = sum(f["lost_steps"] for f in r["faults"])
    lines += [
        "",
        f"Steps run again after a resume (lost since the last save): {lost} in all; nothing "
        "else was lost: the losses and the final save above are the uninterrupted run's.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpipe_repro.runner.soak")
    ap.add_argument("--out", default="reports/soak")
    ap.add_argument("--minutes", type=float, default=20.0, help="the uninterrupted run's length")
    ap.add_argument("--faults", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", default=None, help="where the runs go (default: a temporary folder)")
    a = ap.parse_args(argv)
    if a.faults < 1 or a.minutes <= 0:
        print(
            f"soak: error: --faults={a.faults} --minutes={a.minutes}; allowed: >= 1 and > 0",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        work = Path(a.work) if a.work else Path(tmp)
        r = soak(Path(a.out), a.minutes, a.faults, a.seed, work)
    ok = r["losses_identical"] and r["parameters_identical"] and r["status"] == "ok"
    print(f"soak: {'ok' if ok else 'FAILED'}; report: {Path(a.out) / 'soak.md'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
