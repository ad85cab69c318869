"""Import torchvision on a CPU-only torch build.

The torchvision wheel that pairs with torch 2.13 is a CUDA build; on the CPU torch wheel its import
fails with "operator torchvision::nms does not exist". Declaring the two missing operator schemas
before the import is enough for datasets and transforms (its C++ ops are not used here). On a normal
install the import succeeds at once and nothing is declared.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import torch

_lib: torch.library.Library | None = None


def import_torchvision() -> ModuleType:
    global _lib
    try:
        return importlib.import_module("torchvision")
    except RuntimeError as err:
        if "torchvision::nms" not in str(err):
            raise
    import sys

    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]
    _lib = torch.library.Library("torchvision", "DEF")
    _lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    return importlib.import_module("torchvision")
