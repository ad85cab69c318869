"""Shared test settings: no wandb network; the suite runs on the CPU unless asked for the GPU tests.

A plain ``pytest`` (``make test``) hides every GPU from torch — here and in every process a test
starts — so ``device=auto`` resolves to the CPU and a GPU host runs the same suite as a CPU host.
``pytest -m gpu`` (``make gpu-check``) leaves the GPUs visible; without CUDA the gpu tests skip.
"""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("WANDB_SILENT", "true")


def asks_for_gpu(markexpr: str) -> bool:
    """Whether ``-m`` selects the gpu tests (``gpu``, ``gpu and not slow``; not ``not gpu``)."""
    words = markexpr.replace("(", " ").replace(")", " ").split()
    return any(w == "gpu" and (i == 0 or words[i - 1] != "not") for i, w in enumerate(words))


def pytest_configure(config: pytest.Config) -> None:
    if not asks_for_gpu(config.getoption("markexpr") or ""):
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before anything initialises CUDA


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
