"""The engine benchmark on this host's GPUs (``bench/engine.py --device cuda``), short: the K = 1
variants on one GPU (the K = 2 ones need two), every variant's batch on the device once, a variant
that fails recorded in its ``results.json`` rather than ending the benchmark."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from .common import Ctx, StepOutput

__all__ = ["run"]

ROOT = Path(__file__).resolve().parents[2]


def run(ctx: Ctx) -> StepOutput:
    import json

    out = StepOutput()
    folder = ctx.out / "engine"
    size = ["--repeats", "1", "--steps", "1", "--warmup", "0", "--M", "1", "--max-k", "1"]
    if not ctx.dry:
        size = ["--repeats", "1", "--steps", "4", "--warmup", "1", "--M", "1,4,16"]
    cmd = [sys.executable, "bench/engine.py", "--device", ctx.device, "--out", str(folder), *size]
    with (ctx.out / "engine.log").open("w") as log:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            proc.wait(timeout=max(1.0, ctx.left() - 3))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            out.skipped.append("bench/engine.py: stopped at the step's budget (engine.log)")
    res_path = folder / "results.json"
    if not res_path.exists():
        out.failed.append(f"bench/engine.py wrote no results (exit {proc.returncode}; engine.log)")
        return out
    res = json.loads(res_path.read_text())
    for r in res.get("rows", []):
        for name, value in r.items():
            if name.endswith("_s") and not isinstance(value, dict):
                out.rows.append({"M": r["M"], "variant": name, "step_s": value})
    out.skipped += [f"{k}: {v}" for k, v in res.get("skipped", {}).items()]
    out.failed += [f"{k}: {v}" for k, v in (res.get("failed") or {}).items()]
    if res.get("overhead_K1_M1") is not None:
        out.notes.append(
            f"K = 1, M = 1 against a plain PyTorch step: {res['overhead_K1_M1'] * 100:+.1f}% "
            "(engine/engine.md)."
        )
    return out
