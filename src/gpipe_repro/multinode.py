"""Runs whose ranks are started by someone else: ``torchrun`` (and, through ``gpipe-run``, SLURM).

``gpipe-run`` starts its ranks itself on one machine. Across machines the ranks come from the cluster,
each with RANK / WORLD_SIZE / MASTER_ADDR in its environment, and the Hydra app must not be wrapped
(every rank would compose its own config and output folder). So:

- torchrun: ``torchrun --nnodes N --nproc-per-node P -m gpipe_repro.multinode --out DIR [overrides]``:
  every rank composes the same config (``config.compose``, the path ``gpipe-run`` takes too), runs its
  stage (``runner.run(launcher="torchrun")``), and rank 0 writes DIR/metrics.json, trace.json,
  timeline.png. Command-line mistakes: one line (from rank 0 only), exit 2; bad values: one line, exit
  1 and a failed metrics.json in DIR.
- ``gpipe-torchrun`` (``launch_main``) is torchrun with this module as its script and the mistakes kept
  to one line: it checks the command line and the config before starting any rank (exit 2 / exit 1 with
  a failed metrics.json, as ``gpipe-run``), passes its torchrun options through, and when a rank fails
  exits with that rank's code instead of torchrun's traceback:
  ``gpipe-torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint HOST:29500 --out runs/x pipeline.K=8``
- SLURM: ``gpipe-run hydra/launcher=submitit_slurm hydra.launcher.tasks_per_node=P ...`` (see
  ``runner.cluster``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .config.compose import compose, preflight
from .errors import UserError
from .metrics.contract import RunMetrics
from .metrics.writer import OutputError, write_metrics
from .runner import FolderInUse, run
from .runner.folder import check

__all__ = ["main", "launch_main"]


def _say(msg: str) -> None:
    if os.environ.get("RANK", "0") == "0":  # one voice for the job, not one per rank
        print(f"gpipe-run: error: {msg}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m gpipe_repro.multinode",
        description="One rank of a run started by torchrun (see module docstring).",
    )
    ap.add_argument(
        "--out", required=True, help="folder for metrics.json, trace.json, timeline.png (rank 0)"
    )
    ap.add_argument("overrides", nargs="*", help="the same overrides gpipe-run takes")
    args = ap.parse_args(argv)
    out = Path(args.out)
    err = preflight(args.overrides)
    if err:
        _say(err)
        sys.exit(2)
    try:
        spec = compose(args.overrides, check=False)
    except UserError as e:
        _say(str(e))
        if os.environ.get("RANK", "0") == "0":
            try:
                write_metrics(out, RunMetrics(status="failed", error=str(e)))
            except OutputError:
                pass
        sys.exit(1)
    try:
        m = run(spec, out, launcher="torchrun")
    except Exception as e:  # another rank's own failure: one line, its exit code
        _say(str(e).splitlines()[0] if str(e) else type(e).__name__)
        sys.exit(1)
    if m is None:
        return
    if m.status != "ok":
        _say(f"{m.error}  [{out / 'metrics.json'}]")
        sys.exit(1)
    p = m.pipeline
    print(
        f"K={p.K if p else '?'} M={p.M if p else '?'}: {m.throughput:.1f} samples/s -> {out}",
        flush=True,
    )


def _fail(out: Path, msg: str) -> None:
    print(f"gpipe-run: error: {msg}", file=sys.stderr, flush=True)
    try:
        write_metrics(out, RunMetrics(status="failed", error=msg))
    except OutputError:
        pass


def launch_main(argv: list[str] | None = None) -> None:
    """``gpipe-torchrun [torchrun options] --out DIR [overrides]``."""
    import logging

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser
    from torch.distributed.run import run as torchrun

    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--out", required=True)
    ours, rest = ap.parse_known_args(argv)
    overrides = [
        a for a in rest if not a.startswith("-") and "=" in a and not _is_option_value(rest, a)
    ]
    options = [a for a in rest if a not in overrides]
    out = Path(ours.out)
    err = preflight(overrides)
    if err:
        print(f"gpipe-run: error: {err}", file=sys.stderr)
        sys.exit(2)
    per_node = _nproc_per_node(options)
    if per_node is not None:  # validated against this host's devices, as each rank will be
        os.environ.setdefault("LOCAL_WORLD_SIZE", str(per_node))
    try:
        spec = compose(overrides, check=False)
        check(spec, out)
    except FolderInUse as e:  # another run's results: refused before any rank starts
        print(f"gpipe-run: error: {e}", file=sys.stderr)
        sys.exit(1)
    except UserError as e:
        _fail(out, str(e))
        sys.exit(1)
    os.environ.setdefault("OMP_NUM_THREADS", str(spec.train.threads))  # torchrun's banner otherwise
    args = get_args_parser().parse_args(
        [*options, "-m", "gpipe_repro.multinode", "--out", str(out), *overrides]
    )
    for name in ("torch.distributed.elastic", "torch.distributed.run"):
        logging.getLogger(name).setLevel(logging.CRITICAL)  # the ranks speak for themselves
    try:
        torchrun(args)
    except ChildFailedError as e:
        rank, failure = min(e.failures.items(), key=lambda kv: (kv[1].timestamp, kv[0]))
        if failure.exitcode < 0:  # killed by a signal: it could not say so itself
            print(
                f"gpipe-run: error: rank {rank} was killed by signal {-failure.exitcode}",
                file=sys.stderr,
            )
            sys.exit(1)
        sys.exit(failure.exitcode if failure.exitcode in (1, 2) else 1)


def _nproc_per_node(options: list[str]) -> int | None:
    """torchrun's ``--nproc-per-node N`` (or ``=N``, or the underscore spelling) when a number."""
    for i, a in enumerate(options):
        name, eq, value = a.partition("=")
        if name in ("--nproc-per-node", "--nproc_per_node"):
            value = value if eq else (options[i + 1] if i + 1 < len(options) else "")
            return int(value) if value.isdigit() else None
    return None


def _is_option_value(args: list[str], a: str) -> bool:
    """``a`` follows a torchrun option that takes a value (``--rdzv-endpoint HOST:29500=...``)."""
    i = args.index(a)
    return i > 0 and args[i - 1].startswith("--") and "=" not in args[i - 1]


if __name__ == "__main__":
    main()
