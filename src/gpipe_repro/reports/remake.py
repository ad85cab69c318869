"""``make reports``: remake the stale reports (or every report) one at a time, then the scorecard.

Every table of the paper, and each report beside them, has its own make target (``reports/status.py``
lists them with the code their numbers come from). This runs the targets of the reports that are
stale — or of all of them with ``--all`` — one after the other, never two at once (a report's timings
are only worth something on a quiet machine), each with its output in ``--logs``/``TARGET.log``. A
target that fails or passes ``--timeout-min`` is recorded and the next one runs; at the end
``make scorecard`` re-judges the paper's claims from whatever was remade, and a table says what ran,
how long it took and whether each report is now current.

    python -m gpipe_repro.reports.remake --dry-run          # what would run, in order
    python -m gpipe_repro.reports.remake                    # the stale ones (hours)
    python -m gpipe_repro.reports.remake --all --until 07:00  # every report; start none after 07:00
    python -m gpipe_repro.reports.remake --only sim,plan    # these reports alone, if stale

A target that resumes finished runs of the same command left under ``outputs/`` by an earlier commit
(``runner.jobs``) publishes them with that commit, so its report stays stale; the run says so, and
removing those runs makes the target run them again. Reports are made from one clean commit: with
uncommitted changes to tracked files outside ``reports/`` nothing runs. The reports that others read go first (the GPU check's profiles and the
hardware validation, which Tables 2 and 3 read); a report that needs a CUDA host is left out on a host
without one, and says so. Exit 0 when every target that ran succeeded, 1 when one failed, 2 on bad
input.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..paper.markdown import table
from .status import ENTRIES, Entry, _git, state

# reports that other reports read: made first (Tables 2 and 3 read both)
FIRST = ("gpu", "hw")


@dataclass(frozen=True)
class Outcome:
    """One make target's run: its exit status (None: killed at the timeout) and its wall time."""

    target: str
    reports: tuple[str, ...]
    rc: int | None
    seconds: float


def target(e: Entry) -> str:
    """The make target of ``e`` (``make gpu-check (on a CUDA host ...)`` -> ``gpu-check``)."""
    words = e.make.split()
    if len(words) < 2 or words[0] != "make":
        raise ValueError(
            f"Entry {e.name!r}: make={e.make!r} is invalid; allowed: 'make TARGET ...'"
        )
    return words[1]


def plan(
    root: Path, entries: Sequence[Entry], every: bool, cuda: bool, only: Sequence[str] = ()
) -> tuple[list[tuple[str, tuple[str, ...]]], list[str]]:
    """The targets to run in order, each with the reports it makes, and the reports left out (why);
    ``only``: these reports alone (their names in ``reports/status.py``)."""
    check_only(only, entries)
    chosen = [e for e in entries if (not only or e.name in only) and (every or state(root, e)[1])]
    left = [f"{e.name}: needs a CUDA host (`{e.make}`)" for e in chosen if e.cuda and not cuda]
    chosen = [e for e in chosen if cuda or not e.cuda]
    chosen.sort(key=lambda e: FIRST.index(e.name) if e.name in FIRST else len(FIRST))
    order: dict[str, list[str]] = {}
    for e in chosen:
        order.setdefault(target(e), []).append(e.name)
    return [(t, tuple(names)) for t, names in order.items()], left


def check_only(only: Sequence[str], entries: Sequence[Entry]) -> None:
    """Raise ValueError, naming it, for a name in ``only`` that no report has."""
    names = [e.name for e in entries]
    for n in only:
        if n not in names:
            raise ValueError(f"--only={n!r} is invalid; allowed: report names {', '.join(names)}")


def dirty(root: Path) -> list[str]:
    """Tracked files with uncommitted changes outside ``reports/`` (where the targets write)."""
    out = _git(root, "status", "--porcelain", "--untracked-files=no").stdout.splitlines()
    return [line[3:] for line in out if not line[3:].startswith("reports/")]


def run_target(
    root: Path, name: str, log: Path, timeout_s: float, grace_s: float = 120.0
) -> int | None:
    """``make name`` in ``root`` (no stdin), its output to ``log``; its exit status, None when it
    passed ``timeout_s``: then its process group is sent SIGTERM (a run's own handlers stop the jobs
    it started in sessions of their own) and, ``grace_s`` later, SIGKILL."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        proc = subprocess.Popen(
            ["make", name],
            cwd=root,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 60.0)):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=wait_s)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue
        return None


def remake(
    root: Path,
    steps: list[tuple[str, tuple[str, ...]]],
    logs: Path,
    timeout_s: float,
    until: dt.datetime | None = None,
    now: Callable[[], dt.datetime] = dt.datetime.now,
    say: Callable[[str], None] = lambda line: print(line, flush=True),
) -> tuple[list[Outcome], list[str]]:
    """Run ``steps`` one at a time; the outcomes, and the targets not started (``until`` passed)."""
    done: list[Outcome] = []
    for i, (name, reports) in enumerate(steps):
        if until is not None and now() >= until:
            return done, [t for t, _ in steps[i:]]
        say(f"remake: make {name} ({', '.join(reports)}) started {now():%H:%M}")
        t0 = time.monotonic()
        rc = run_target(root, name, logs / f"{name}.log", timeout_s)
        done.append(Outcome(name, reports, rc, time.monotonic() - t0))
        say(f"remake: make {name}: {_status(rc)} after {done[-1].seconds / 60:.1f} min")
    return done, []


def _status(rc: int | None) -> str:
    return "timed out (killed)" if rc is None else "ok" if rc == 0 else f"failed (exit {rc})"


def states_after(
    root: Path, done: Sequence[Outcome], entries: Sequence[Entry]
) -> dict[str, tuple[str, bool]]:
    """Each remade report's (recorded commit, whether it is still stale), read once after the run."""
    by_name = {e.name: e for e in entries}
    return {n: state(root, by_name[n])[:2] for o in done for n in o.reports}


def summary(done: Sequence[Outcome], after: dict[str, tuple[str, bool]]) -> str:
    rows = []
    for o in done:
        now_stale = [n for n in o.reports if after[n][1]]
        rows.append([f"`make {o.target}`", ", ".join(o.reports), _status(o.rc),
                     f"{o.seconds / 60:.1f}", ", ".join(now_stale) or "current"])  # fmt: skip
    return table(["target", "reports", "result", "minutes", "stale after"], rows)


def still_stale(done: Sequence[Outcome], after: dict[str, tuple[str, bool]]) -> list[str]:
    """A line per report whose target succeeded but which is still stale, with the commit it
    records: a target that resumes finished runs (``runner.jobs`` reuses a run of the same command)
    publishes them with the commit they were made at."""
    return [
        f"remake: {n} is still stale after `make {o.target}`: it records commit {after[n][0]}"
        " (runs resumed from an earlier commit? remove them from outputs/ to run them again)"
        for o in done
        if o.rc == 0
        for n in o.reports
        if after[n][1]
    ]


def _until(text: str) -> dt.datetime:
    """Today's HH:MM (tomorrow's when it has passed)."""
    try:
        t = dt.datetime.strptime(text, "%H:%M").time()
    except ValueError:
        raise ValueError(f"--until={text!r} is invalid; allowed: a time HH:MM (24 h)") from None
    when = dt.datetime.combine(dt.date.today(), t)
    return when if when > dt.datetime.now() else when + dt.timedelta(days=1)


def _cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpipe_repro.reports.remake", description=__doc__)
    ap.add_argument("--root", type=Path, default=Path("."), help="the repository")
    ap.add_argument("--all", action="store_true", help="every report, not only the stale ones")
    ap.add_argument("--until", help="HH:MM: start no target after this time")
    ap.add_argument("--timeout-min", type=float, default=300.0, help="kill a target after this")
    ap.add_argument("--logs", type=Path, default=Path("outputs/remake"), help="one log per target")
    ap.add_argument("--only", default="", help="NAME,...: these reports alone (if stale)")
    ap.add_argument("--dry-run", action="store_true", help="print the order, run nothing")
    a = ap.parse_args(argv)
    only = [n for n in a.only.split(",") if n]
    try:
        until = _until(a.until) if a.until else None
        if not a.timeout_min > 0:
            raise ValueError(f"--timeout-min={a.timeout_min} is invalid; allowed: minutes > 0")
        check_only(only, ENTRIES)
    except ValueError as err:
        print(f"remake: error: {err}", file=sys.stderr)
        return 2
    if _git(a.root, "rev-parse", "--git-dir").returncode:
        print(
            f"remake: error: --root={a.root!s} is invalid; allowed: a git repository",
            file=sys.stderr,
        )
        return 2
    changed = dirty(a.root)
    if changed and not a.dry_run:
        print(f"remake: error: the tree has uncommitted changes ({', '.join(changed[:3])}"
              f"{' ...' if len(changed) > 3 else ''}); allowed: a clean commit (reports/ aside)",
              file=sys.stderr)  # fmt: skip
        return 2
    steps, left = plan(a.root, ENTRIES, a.all, _cuda(), only)
    for line in left:
        print(f"remake: left out: {line}")
    if not steps:
        print("remake: nothing to remake: every report is current")
        return 0
    if a.dry_run:
        for name, reports in steps:
            print(f"make {name}  # {', '.join(reports)}")
        return 0
    root = a.root.resolve()
    done, skipped = remake(root, steps, (root / a.logs), a.timeout_min * 60, until)
    card: int | None = 0
    if any(o.rc == 0 for o in done):
        card = run_target(root, "scorecard", root / a.logs / "scorecard.log", 600)
        print(f"remake: make scorecard: {_status(card)}")
    after = states_after(root, done, ENTRIES)
    print(summary(done, after))
    for line in still_stale(done, after):
        print(line)
    if skipped:
        print(f"remake: not started (--until {a.until} passed): {', '.join(skipped)}")
    return 1 if card != 0 or any(o.rc != 0 for o in done) else 0


if __name__ == "__main__":
    sys.exit(main())
