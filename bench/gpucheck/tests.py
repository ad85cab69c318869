"""The ``gpu``-marked tests this host can run, every one bounded.

All of them in one pytest process first (one start-up and one import of torch, not one per test),
each test limited by pytest-timeout to ``per_test_s``; if that process dies or overruns its limit
(an NCCL wait that hangs, a crash in a kernel), the tests it did not report run again one per
process, each in its own process group killed at its limit. Tests that need more GPUs than the host
has skip and say so. Outcomes come from pytest's junit XML.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from .common import Ctx, StepOutput

__all__ = ["FILES", "junit", "run"]

ROOT = Path(__file__).resolve().parents[2]
FILES = ("tests/engine/test_cuda.py", "tests/runner/test_gpu.py")  # where the gpu tests live
PER_TEST_S = 100


def junit(path: Path) -> dict[str, tuple[str, str]]:
    """test id -> (passed | failed | skipped, first line of its message)."""
    if not path.exists():
        return {}
    out = {}
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError:
        return {}
    for case in root.iter("testcase"):
        mod = (case.get("classname") or "").replace(".", "/")
        name = f"{mod}.py::{case.get('name', '')}"
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome = "skipped" if tag == "skipped" else "failed"
                message = ((el.get("message") or "").splitlines() or [""])[0][:300]
        out[name] = (outcome, message)
    return out


def _pytest(args: list[str], xml: Path, log: Path, limit_s: float, env: dict[str, str]) -> str:
    """pytest ``args`` in its own process group, killed past ``limit_s``; its status in words."""
    with log.open("w") as f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--junitxml={xml}", *args],
            cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
        try:
            rc = proc.wait(timeout=max(1.0, limit_s))
            return "ok" if rc in (0, 1, 5) else f"exit {rc}"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return f"killed at {limit_s:.0f} s"


def _collect(env: dict[str, str], files: tuple[str, ...]) -> list[str]:
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "gpu", "--collect-only", "-q", *files],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    return [line for line in r.stdout.splitlines() if "::" in line and " " not in line]


def run(ctx: Ctx) -> StepOutput:
    out = StepOutput()
    env = {**os.environ, "GPIPE_GPU_RECORD": str(ctx.out / "records.jsonl")}
    files = FILES[:1] if ctx.dry else FILES
    per_test = 20 if ctx.dry else PER_TEST_S
    ids = _collect(env, files)
    if ctx.dry:  # every gpu test skips without CUDA: two show the path
        ids = ids[:2]
    xml = ctx.out / "pytest.xml"
    t0 = time.monotonic()
    status = _pytest(
        ["-m", "gpu", f"--timeout={per_test}", *ids],
        xml,
        ctx.out / "pytest.log",
        ctx.left() - 5,
        env,
    )
    got = junit(xml)
    missing = [t for t in ids if t not in got]
    if missing:
        out.notes.append(
            f"The one pytest process ended ({status}) after {time.monotonic() - t0:.0f} s with "
            f"{len(missing)} test(s) unreported: each ran again in a process of its own."
        )
    for n, test in enumerate(missing):
        if ctx.left() < 10:
            out.skipped.append(f"{test}: not run again, the step's budget is spent")
            continue
        one = ctx.out / f"pytest-{n}.xml"
        limit = min(per_test + 20, ctx.left() - 5)
        st = _pytest(
            ["-m", "gpu", f"--timeout={per_test}", test],
            one,
            ctx.out / f"pytest-{n}.log",
            limit,
            env,
        )
        res = junit(one).get(test) or ("failed", f"{st} (pytest-{n}.log)")
        got[test] = res
    for test in ids:
        outcome, message = got.get(test, ("not run", ""))
        out.rows.append({"test": test, "outcome": outcome, "message": message})
    return out
