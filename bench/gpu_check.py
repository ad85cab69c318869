"""``make gpu-check``: everything that needs a GPU, in one command -> reports/gpu/.

    python bench/gpu_check.py --out reports/gpu

On a host without a GPU it prints one line and exits 0, running nothing. On a host whose driver sees
GPUs (``nvidia-smi -L``) but whose torch does not (a CPU build, or a CUDA build that does not match
the driver) it prints one line and exits 1: that is a broken install, not a host without GPUs
(``make setup-gpu`` builds the right one). On a CUDA host it runs

1. each ``gpu``-marked test in a process of its own with its own time limit (``--test-timeout-s``,
   at most 120 s), so that a test that hangs (an NCCL deadlock waits for the 300 s watchdog) is
   reported as timed out and the others still run: the CUDA path over nccl (both schedules,
   replicas, saves and resume, evaluation), the planner's per-stage prediction against
   ``torch.cuda.max_memory_allocated`` in fp32 and bf16, bf16 and fp32 losses identical across K;
   each test appends what it measured to ``records.jsonl``;
2. the engine benchmark on the GPUs present (``bench/engine.py --device cuda``);

and always writes ``reports/gpu/`` — ``gpu.md`` (device names, every test's outcome, every number,
what failed and why), ``results.json`` (the same as data), ``pytest-<n>.xml``, ``records.jsonl``,
``engine/``. Exit status 1 when anything failed, so a CI job can tell.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


TEST_TIMEOUT_S = 120  # the most one gpu test may take (issue #22: every test bounded)


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

    if torch.cuda.is_available():
        return None
    seen = driver_gpus()
    if seen:
        build = f"a CUDA {torch.version.cuda} build" if torch.version.cuda else "a CPU build"
        return (
            f"gpu-check: error: nvidia-smi sees {seen} GPU(s) but torch {torch.__version__} "
            f"({build}) does not; install the CUDA torch with make setup-gpu",
            1,
        )
    return (
        f"gpu-check: skipped, no CUDA device (torch {torch.__version__}, CUDA "
        f"{torch.version.cuda or 'not built'}); nothing was run.",
        0,
    )


def devices() -> list[dict[str, Any]]:
    import torch

    out = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        out.append(
            {
                "index": i,
                "name": p.name,
                "memory_bytes": p.total_memory,
                "capability": f"{p.major}.{p.minor}",
                "multiprocessors": p.multi_processor_count,
            }
        )
    return out


def _run(cmd: list[str], log: Path, timeout_s: int, env: dict[str, str]) -> dict[str, Any]:
    """Run one step in its own process group (its ranks included); its output goes to ``log``.
    Never raises and never hangs: past ``timeout_s`` the whole group is killed; the outcome is data."""
    t0 = time.perf_counter()
    with log.open("w") as f:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            rc = proc.wait(timeout=timeout_s)
            status = "ok" if rc == 0 else f"failed (exit {rc})"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            status = f"timed out after {timeout_s} s"
    return {
        "command": " ".join(cmd),
        "status": status,
        "seconds": round(time.perf_counter() - t0, 1),
        "log": log.name,
    }


def gpu_tests(env: dict[str, str]) -> list[str]:
    """The ids of the ``gpu``-marked tests."""
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "gpu", "--collect-only", "-q", "tests"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    return [line for line in r.stdout.splitlines() if "::" in line and " " not in line]


def run_tests(out: Path, env: dict[str, str], timeout_s: int) -> tuple[dict[str, Any], list]:
    """Each gpu test in its own process group with its own time limit; (step summary, outcomes)."""
    t0 = time.perf_counter()
    outcomes: list[dict[str, str]] = []
    for n, test in enumerate(gpu_tests(env)):
        xml = out / f"pytest-{n}.xml"
        step = _run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-v",
                "-p",
                "no:cacheprovider",
                f"--junitxml={xml}",
                test,
            ],
            out / f"pytest-{n}.log",
            timeout_s,
            env,
        )
        got = junit(xml)
        if step["status"].startswith("timed out") or not got:
            got = [
                {"test": test, "outcome": "failed", "message": f"{step['status']} ({step['log']})"}
            ]
        outcomes += got
    failed = sum(t["outcome"] == "failed" for t in outcomes)
    summary = {
        "command": f"pytest -m gpu, each test alone within {timeout_s} s",
        "status": "ok" if not failed else f"failed ({failed} test(s))",
        "seconds": round(time.perf_counter() - t0, 1),
        "log": "pytest-<n>.log",
    }
    return summary, outcomes


def junit(path: Path) -> list[dict[str, str]]:
    """Each test's outcome from pytest's junit xml: passed, failed (with its message) or skipped."""
    if not path.exists():
        return []
    out = []
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome = "skipped" if tag == "skipped" else "failed"
                message = (
                    (el.get("message") or "").splitlines()[0][:300] if el.get("message") else ""
                )
        out.append({"test": name, "outcome": outcome, "message": message})
    return out


def records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def markdown(res: dict[str, Any]) -> str:
    devs = res["devices"]
    lines = [
        "# GPU check",
        "",
        f"Generated by `make gpu-check` (`bench/gpu_check.py`) on {res['host']}, torch {res['torch']} "
        f"(CUDA {res['cuda']}), {res['date']}. Every number is measured on these devices.",
        "",
        "## Devices",
        "",
        "| # | name | memory (GiB) | capability | SMs |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {d['index']} | {d['name']} | {d['memory_bytes'] / 2**30:.1f} | {d['capability']} | "
        f"{d['multiprocessors']} |"
        for d in devs
    ]
    failed = [t for t in res["tests"] if t["outcome"] == "failed"]
    bad_steps = [s for s in res["steps"].values() if s["status"] != "ok"]
    lines += ["", "## What failed", ""]
    lines += [f"- `{t['test']}`: {t['message'] or 'see pytest.log'}" for t in failed]
    lines += [f"- step `{s['command']}`: {s['status']} (see `{s['log']}`)" for s in bad_steps]
    if not failed and not bad_steps:
        lines.append("Nothing.")
    lines += ["", "## Steps", "", "| step | status | seconds |", "|---|---|---|"]
    lines += [
        f"| `{s['command']}` | {s['status']} | {s['seconds']} |" for s in res["steps"].values()
    ]
    lines += ["", "## Tests (`pytest -m gpu`)", "", "| test | outcome | message |", "|---|---|---|"]
    lines += [f"| `{t['test']}` | {t['outcome']} | {t['message']} |" for t in res["tests"]]
    lines += ["", "## Numbers the tests measured (`records.jsonl`)", ""]
    for r in res["records"]:
        rest = {k: v for k, v in r.items() if k != "test"}
        lines.append(
            f"- **{r['test']}**: " + ", ".join(f"{k} = {_fmt(v)}" for k, v in rest.items())
        )
    lines += [
        "",
        "## Engine benchmark",
        "",
        "See [`engine/engine.md`](engine/engine.md) (raw numbers in `engine/results.json`)."
        if (Path(res["out"]) / "engine" / "engine.md").exists()
        else "Not produced: see the steps above.",
        "",
    ]
    return "\n".join(lines)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_fmt(x)}" for k, x in v.items()) + "}"
    return str(v)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/gpu_check.py")
    ap.add_argument("--out", default="reports/gpu")
    ap.add_argument("--test-timeout-s", type=int, default=TEST_TIMEOUT_S)
    ap.add_argument("--bench-timeout-s", type=int, default=1800)
    a = ap.parse_args(argv)
    if not 1 <= a.test_timeout_s <= TEST_TIMEOUT_S:
        print(
            f"gpu-check: error: --test-timeout-s={a.test_timeout_s}; allowed: 1..{TEST_TIMEOUT_S}"
        )
        return 2
    reason = no_cuda_reason()
    if reason is not None:
        line, code = reason
        print(line, file=sys.stderr if code else sys.stdout)
        return code
    import torch

    out = Path(a.out).resolve()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    env = {
        **os.environ,
        "GPIPE_GPU_RECORD": str(out / "records.jsonl"),
        "WANDB_MODE": "disabled",
        "GPIPE_PROGRESS": "0",
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])
        ),
    }
    res: dict[str, Any] = {
        "host": platform.node(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "devices": devices(),
        "out": str(out),
        "steps": {},
    }
    print(
        f"gpu-check: {len(res['devices'])} GPU(s): {', '.join(d['name'] for d in res['devices'])}",
        flush=True,
    )
    res["steps"]["tests"], res["tests"] = run_tests(out, env, a.test_timeout_s)
    print(f"gpu-check: tests {res['steps']['tests']['status']}", flush=True)
    res["steps"]["bench"] = _run(
        [sys.executable, "bench/engine.py", "--device", "cuda", "--out", str(out / "engine")],
        out / "bench.log",
        a.bench_timeout_s,
        env,
    )
    print(f"gpu-check: engine benchmark {res['steps']['bench']['status']}", flush=True)
    res["records"] = records(out / "records.jsonl")
    (out / "results.json").write_text(json.dumps(res, indent=2, default=str))
    (out / "gpu.md").write_text(markdown(res))
    failed = [t for t in res["tests"] if t["outcome"] == "failed"] or [
        s for s in res["steps"].values() if s["status"] != "ok"
    ]
    print(f"gpu-check: {'FAILED' if failed else 'ok'}; report: {out / 'gpu.md'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
