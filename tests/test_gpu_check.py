"""``make gpu-check`` on hosts it cannot run on: one line, and the exit status that tells them apart."""

from __future__ import annotations

import importlib.util
import subprocess
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
    assert "nvidia-smi sees 2 GPU(s) but torch" in err and "make setup-gpu" in err


def test_a_host_without_gpus_skips_in_one_line(monkeypatch, capsys, gpu_check):
    _driver(monkeypatch, gpu_check, None)
    assert gpu_check.main(["--out", "unused"]) == 0
    out, _ = capsys.readouterr()
    assert len(out.strip().splitlines()) == 1 and "skipped, no CUDA device" in out


def test_a_test_may_take_at_most_two_minutes(capsys, gpu_check):
    assert gpu_check.main(["--test-timeout-s", "600"]) == 2
    assert "allowed: 1..120" in capsys.readouterr().out
