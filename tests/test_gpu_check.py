"""``make gpu-check``: one line on hosts it cannot run on (and the exit status that tells them apart),
and its CPU dry run — every step's code path, the same files, on the CPU at tiny sizes."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "bench" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _driver(monkeypatch, gpu_check, listing: str | None) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(
        gpu_check.shutil, "which", lambda name: "/usr/bin/nvidia-smi" if listing else None
    )
    done = subprocess.CompletedProcess(["nvidia-smi", "-L"], 0, stdout=listing or "", stderr="")
    monkeypatch.setattr(gpu_check.subprocess, "run", lambda *a, **k: done)


def test_gpus_the_driver_sees_but_torch_does_not_fail_in_one_line(monkeypatch, capsys, gpu_check):
    _driver(
        monkeypatch, gpu_check, "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\nGPU 1: NVIDIA H100\n"
    )
    assert gpu_check.main(["--out", "unused"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert "nvidia-smi sees 2 GPU(s) but torch" in err and "TORCH=given" in err


def test_a_host_without_gpus_skips_in_one_line(monkeypatch, capsys, gpu_check):
    _driver(monkeypatch, gpu_check, None)
    assert gpu_check.main(["--out", "unused"]) == 0
    out, _ = capsys.readouterr()
    assert len(out.strip().splitlines()) == 1 and "skipped, no CUDA device" in out


def test_a_gpu_with_a_torch_below_the_floor_is_refused_in_one_line(monkeypatch, capsys, gpu_check):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch, "__version__", "2.10.0+cu128")
    assert gpu_check.main(["--out", "unused"]) == 1
    _, err = capsys.readouterr()
    assert len(err.strip().splitlines()) == 1
    assert "2.10.0+cu128 is below the supported floor" in err and ">= 2.11" in err


def test_the_gpu_test_files_are_every_file_with_a_gpu_test():
    """The tests step runs the gpu tests of these files only (collecting every test file would
    take the step's time): a gpu test in another file would silently never run."""
    sys.path.insert(0, str(ROOT / "bench"))
    from gpucheck.tests import FILES

    marked = {
        str(p.relative_to(ROOT))
        for p in (ROOT / "tests").rglob("test_*.py")
        if re.search(r"^(@pytest\.mark\.gpu|pytestmark = pytest\.mark\.gpu)\b", p.read_text(), re.M)
    }
    assert marked == set(FILES)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_dry_run_runs_every_step_and_writes_the_report(tmp_path):
    out = tmp_path / "gpu"
    env = {
        "GPIPE_CACHE": str(tmp_path / "cache"),
        "WANDB_MODE": "disabled",
        "PATH": "/usr/bin:/bin",
    }
    r = subprocess.run(
        [sys.executable, "bench/gpu_check.py", "--dry-run", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=230,
        env=env,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    assert res["dry_run"] and res["verdict"] == "ok"
    assert {k: s["status"] for k, s in res["steps"].items()} == dict.fromkeys(
        ("tests", "tf32", "cells", "profiles", "engine"), "ok"
    )
    outputs = res["outputs"]
    assert all(outputs[k]["rows"] for k in ("tests", "tf32", "cells", "profiles", "engine"))
    assert {r["outcome"] for r in outputs["tests"]["rows"]} == {"skipped"}  # no CUDA here
    cell = outputs["cells"]["rows"][0]
    assert cell["planned_gib"] is not None and cell["h100_sim_s"] > 0 and cell["h200_sim_s"] > 0
    assert 0 < cell["busy_share"] <= 1.0
    page = (out / "gpu.md").read_text()
    assert "Dry run on the CPU" in page and "Not a publishable" in page or "# GPU check" in page
    for f in ("results.csv", "provenance.json", "profiles/table2_transformer.json"):
        assert (out / f).is_file(), f
    # the profile it wrote loads back as a committed profile (studies.gpu_series reads these)
    from gpipe_repro.sim.measured.committed import load

    committed = load(out / "profiles" / "table2_transformer.json")
    assert committed.experiment == "table2_transformer" and committed.link is None
