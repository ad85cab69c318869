"""Runs whose ranks are started by someone else: ``torchrun`` (and, through ``gpipe-run``, SLURM).

``gpipe-run`` starts its ranks itself on one machine. Across machines the ranks come from the cluster,
each with RANK / WORLD_SIZE / MASTER_ADDR in its environment, and the Hydra app must not be wrapped
(every rank would compose its own config and output folder). So:

- torchrun: ``torchrun --nnodes N --nproc-per-node P -m gpipe_repro.multinode --out DIR [overrides]``:
  every rank composes the same config (``config.compose``, the path ``gpipe-run`` takes too), runs its
  stage (``runner.run(launcher="torchrun")``), and rank 0 writes DIR/metrics.json, trace.json,
  timeline.png. Command-line mistakes: one line (from rank 0 only), exit 2; bad values: one line, exit
  1 and a failed metrics.json in DIR.
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
from .runner import run

__all__ = ["main"]


def _say(msg: str) -> None:
    if os.environ.get("RANK", "0") == "0":  # one voice for the job, not one per rank
        print(f"gpipe-run: error: {msg}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m gpipe_repro.multinode",
                                 description="One rank of a run started by torchrun (see module docstring).")
    ap.add_argument("--out", required=True, help="folder for metrics.json, trace.json, timeline.png (rank 0)")
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
    print(f"K={p.K if p else '?'} M={p.M if p else '?'}: {m.throughput:.1f} samples/s -> {out}", flush=True)


if __name__ == "__main__":
    main()
