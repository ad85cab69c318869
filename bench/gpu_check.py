"""``make gpu-check``: what one GPU can tell in one prepared command of at most 8 minutes -> reports/gpu/.

    python bench/gpu_check.py --out reports/gpu [--setup-s S]     # on a CUDA host (make gpu-check)
    python bench/gpu_check.py --dry-run --out /tmp/gpu-dry        # every step on the CPU, tiny sizes

On a host without a GPU it prints one line and exits 0, running nothing. On a host whose driver sees
GPUs (``nvidia-smi -L``) but whose torch does not (a CPU build, or a CUDA build that does not match
the driver) it prints one line and exits 1: a broken install, not a host without GPUs. A torch below
the supported floor (``gpipe_repro.supported``) is one line and exit 1 too. On a CUDA host it runs the
steps of ``bench/gpucheck`` in order, each in a process of its own with its own time budget (a case
that does not fit the budget left is skipped and recorded, not run late):

1. ``tests``: the ``gpu`` tests this host can run, each within 100 s;
2. ``tf32``: CUDA losses against the CPU's for a small K = 1 model, TF32 off and on;
3. ``cells``: AmoebaNet-D(18, 256) at batch 128 (M = 1, 4, 32; remat never / always where it fits)
   and a Transformer-L in fp32 and bf16 — the memory planner against ``max_memory_allocated`` (the
   CUDA context, cuBLAS's workspace and the allocator's fragmentation named), CUDA-event busy time
   against wall time per step, the measured step against ``backend=sim hardware=h100`` and ``h200``;
4. ``profiles``: the per-layer costs of Table 2's (then Table 3's) models on this GPU, written as
   ``profiles/<experiment>.json`` — committed, Tables 2 and 3 gain a series simulated from them;
5. ``engine``: the engine benchmark's K = 1 variants (``bench/engine.py --device cuda``).

Budgets: ``TOTAL_S`` (480 s) less the set-up's seconds (``--setup-s``, measured by ``make gpu-check``)
and a reserve for the report, shared by the steps in order with ``CAPS`` each; what a step leaves
unused goes to the next. It always writes the folder: ``gpu.md`` (the page), ``results.csv``,
``results.json``, ``provenance.json``, ``steps/*.json``, the logs, ``profiles/``, ``engine/``. Exit
status 1 when a gpu test failed or a step crashed or overran; cases left out for time are not
failures (the page lists them).
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

TOTAL_S = 480  # what a lent GPU host gives one prepared command, set-up included
REPORT_S = 15  # kept for the report
# (step, title, cap in seconds on an H100): the order they run in
CAPS: list[tuple[str, str, float]] = [
    ("tests", "The gpu tests one GPU can run", 120),
    ("tf32", "CUDA losses against the CPU's, TF32 off and on", 30),
    ("cells", "Memory planner, busy time and roofline against one GPU", 130),
    ("profiles", "Per-layer costs of the paper's models on this GPU", 100),
    ("engine", "Engine benchmark (K = 1)", 40),
]
STEP_GRACE_S = 20  # past its budget a step's process is killed (a case in flight may overrun)


def driver_gpus() -> int:
    """GPUs the NVIDIA driver lists (``nvidia-smi -L``); 0 without the tool or a driver."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def no_cuda_reason() -> tuple[str, int] | None:
    """Why this host cannot run the check, in one line, and the exit status; None when it can."""
    import torch

    from gpipe_repro.supported import check_torch

    if torch.cuda.is_available():
        too_old = check_torch(torch.__version__)
        return (f"gpu-check: error: {too_old}", 1) if too_old else None
    seen = driver_gpus()
    if seen:
        build = f"a CUDA {torch.version.cuda} build" if torch.version.cuda else "a CPU build"
        return (
            f"gpu-check: error: nvidia-smi sees {seen} GPU(s) but torch {torch.__version__} "
            f"({build}) does not; set up with the host's CUDA torch (make setup TORCH=given) or "
            "make setup-gpu",
            1,
        )
    return (
        f"gpu-check: skipped, no CUDA device (torch {torch.__version__}, CUDA "
        f"{torch.version.cuda or 'not built'}); nothing was run.",
        0,
    )


def devices(dry: bool) -> list[dict[str, Any]]:
    import torch

    if dry:
        from gpipe_repro.config.device import cpu_name

        return [{"index": 0, "name": f"{cpu_name()} (dry run: the CPU)"}]
    out = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        out.append(
            {
                "index": i,
                "name": p.name,
                "memory_gib": round(p.total_memory / 2**30, 1),
                "capability": f"{p.major}.{p.minor}",
                "multiprocessors": p.multi_processor_count,
            }
        )
    return out


def run_step(
    name: str, out: Path, budget_s: float, dry: bool, env: dict[str, str]
) -> dict[str, Any]:
    """One step in a process (group) of its own, killed ``STEP_GRACE_S`` past its budget."""
    t0 = time.monotonic()
    cmd = [
        sys.executable,
        __file__,
        "--step",
        name,
        "--out",
        str(out),
        "--step-budget-s",
        f"{budget_s:.0f}",
    ]
    if dry:
        cmd.append("--dry-run")
    with (out / f"{name}.log").open("w") as log:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            rc = proc.wait(timeout=budget_s + STEP_GRACE_S)
            status = "ok" if rc == 0 else f"failed (exit {rc}; {name}.log)"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            status = f"killed {STEP_GRACE_S} s past its budget ({name}.log)"
    return {
        "status": status,
        "seconds": round(time.monotonic() - t0, 1),
        "budget_s": round(budget_s),
    }


def one_step(name: str, out: Path, budget_s: float, dry: bool) -> int:
    """``--step NAME``: run that step here and save its output (``steps/NAME.json``)."""
    from gpucheck.common import Ctx

    mod = importlib.import_module(f"gpucheck.{name}")
    step_file = out / "steps" / f"{name}.json"
    ctx = Ctx(out, dry, time.monotonic() + budget_s, step_file)
    mod.run(ctx).save(step_file)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/gpu_check.py", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="reports/gpu")
    ap.add_argument("--dry-run", action="store_true", help="every step on the CPU at tiny sizes")
    ap.add_argument(
        "--setup-s", type=float, default=0.0, help="seconds the set-up took (make gpu-check)"
    )
    ap.add_argument("--step", choices=[c[0] for c in CAPS], help=argparse.SUPPRESS)
    ap.add_argument("--step-budget-s", type=float, default=60.0, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    out = Path(a.out).resolve()
    if a.step:
        return one_step(a.step, out, a.step_budget_s, a.dry_run)
    if not 0 <= a.setup_s < TOTAL_S:
        print(
            f"gpu-check: error: --setup-s={a.setup_s}; allowed: 0..{TOTAL_S - 1}", file=sys.stderr
        )
        return 2
    if not a.dry_run and (reason := no_cuda_reason()) is not None:
        line, code = reason
        print(line, file=sys.stderr if code else sys.stdout)
        return code
    import torch

    from gpipe_repro.paper.provenance import Provenance

    t_start = time.monotonic()
    if out.exists():
        shutil.rmtree(out)
    (out / "steps").mkdir(parents=True)
    env = {
        **os.environ,
        "WANDB_MODE": "disabled",
        "GPIPE_PROGRESS": "0",
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])
        ),
    }
    devs = devices(a.dry_run)
    print(
        f"gpu-check: {', '.join(d['name'] for d in devs)}; steps: {', '.join(c[0] for c in CAPS)}",
        flush=True,
    )
    deadline = t_start + TOTAL_S - a.setup_s - REPORT_S
    steps: dict[str, Any] = {}
    leftover = 0.0
    for name, _, cap in CAPS:
        left = deadline - time.monotonic()
        budget = min(cap + leftover, left)
        if budget < 10:
            steps[name] = {"status": f"not run: {left:.0f} s left", "seconds": 0.0, "budget_s": 0}
            continue
        steps[name] = run_step(name, out, budget, a.dry_run, env)
        leftover = max(0.0, budget - steps[name]["seconds"])
        print(
            f"gpu-check: {name} {steps[name]['status']} in {steps[name]['seconds']} s", flush=True
        )
    outputs = {}
    for name, *_ in CAPS:
        f = out / "steps" / f"{name}.json"
        if f.exists():
            import json

            outputs[name] = json.loads(f.read_text())
    failed_tests = [r for r in outputs.get("tests", {}).get("rows", []) if r["outcome"] == "failed"]
    bad = [
        k for k, s in steps.items() if s["status"] != "ok" and not s["status"].startswith("not run")
    ]
    broke = {k: len(o.get("failed", [])) for k, o in outputs.items() if o.get("failed")}
    problems = (
        [f"{len(failed_tests)} gpu test(s) failed"] * bool(failed_tests)
        + [f"step {k}: {steps[k]['status']}" for k in bad]
        + [f"{k}: {n} case(s) failed" for k, n in broke.items()]
    )
    verdict = "; ".join(problems) or "ok"
    steps_s = time.monotonic() - t_start
    res = {
        "host": platform.node(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "dry_run": a.dry_run,
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "devices": devs,
        "setup_s": a.setup_s,
        "steps_s": round(steps_s, 1),
        "total_s": round(steps_s + a.setup_s, 1),
        "target_s": TOTAL_S,
        "verdict": verdict,
        "steps": steps,
        "outputs": outputs,
    }
    from gpucheck import report

    command = "bench/gpu_check.py --dry-run" if a.dry_run else "make gpu-check"
    prov = replace(Provenance.here(devs[0]["name"] if devs else ""), command=command)
    prov.save(out)
    titles = {}
    for name, title, _ in CAPS:
        doc = (importlib.import_module(f"gpucheck.{name}").__doc__ or "").strip()
        titles[name] = (title, " ".join(doc.split("\n\n")[0].split()))
    report.write(out, res, titles, prov.page("GPU check"))
    print(
        f"gpu-check: {'ok' if verdict == 'ok' else 'FAILED: ' + verdict}; report: {out / 'gpu.md'}"
    )
    return 0 if verdict == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
