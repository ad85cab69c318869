"""Where measured profiles are kept, and the keys that say when a stored one still applies.

A measurement is only valid for the device, torch version and thread count it ran with, and for
the exact layers and input shapes it timed. Each profile is a JSON file under
``$GPIPE_CACHE/profiles/`` (default ``~/.cache/gpipe-repro/profiles/``), named by a hash of a key
that holds all of these; the key is stored inside the file too and compared on load, so a hash
collision or a hand-edited file is re-measured rather than trusted. An unreadable or corrupt file
is treated as absent.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = ["cache_dir", "device_name", "key_digest", "load", "save", "structure", "tensor_shapes"]

FORMAT = 3  # bump when the stored layout or meaning changes; older files are then re-measured
# 2: a layer's B and W are its split's own cost over a whole backward, no longer B's share of it
# 3: the optimiser step is timed in the stream after its backwards, no longer apart on zero gradients


def cache_dir() -> Path:
    """``$GPIPE_CACHE/profiles`` (default ``~/.cache/gpipe-repro/profiles``)."""
    root = os.environ.get("GPIPE_CACHE") or os.path.join(Path.home(), ".cache", "gpipe-repro")
    return Path(root) / "profiles"


def device_name(device: torch.device | str = "cpu") -> str:
    """The CUDA device name, or the CPU model string from /proc/cpuinfo."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown cpu"


def _simple(value: Any) -> Any:
    """A JSON-able description of a module attribute (configuration, not state)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, tuple | list):
        return [_simple(v) for v in value]
    if isinstance(value, torch.Tensor):
        return ["tensor", list(value.shape), str(value.dtype)]
    if isinstance(value, torch.dtype | torch.device):
        return str(value)
    if callable(value):
        return getattr(value, "__qualname__", type(value).__qualname__)
    return type(value).__qualname__


def structure(module: nn.Module) -> list:
    """The module's structure: every submodule's type and plain attributes (kernel size, stride,
    pooling kind, dropout rate, training flag...), and every parameter's and buffer's shape and
    dtype. Two layers with equal structure and equal input shapes do the same work."""
    mods = [
        [
            name,
            f"{type(m).__module__}.{type(m).__qualname__}",
            {k: _simple(v) for k, v in sorted(vars(m).items()) if not k.startswith("_")},
        ]
        for name, m in module.named_modules()
    ]
    params = [
        [n, list(p.shape), str(p.dtype), p.requires_grad] for n, p in module.named_parameters()
    ]
    bufs = [[n, list(b.shape), str(b.dtype)] for n, b in module.named_buffers()]
    return [mods, params, bufs]


def tensor_shapes(tensors: Iterable[torch.Tensor]) -> list:
    return [[list(t.shape), str(t.dtype)] for t in tensors]


def key_digest(key: Any) -> str:
    """A stable hash of a JSON-able key."""
    text = json.dumps(key, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _path(kind: str, key: Any) -> Path:
    return cache_dir() / f"{kind}-{key_digest(key)}.json"


def load(kind: str, key: Any) -> dict | None:
    """The stored record for ``key``, or None when absent, unreadable, corrupt or for another key."""
    try:
        with open(_path(kind, key), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    # Compare through JSON so tuples and lists of the same content agree.
    if json.loads(json.dumps(key)) != data.get("key") or not isinstance(data.get("value"), dict):
        return None
    return data["value"]


def save(kind: str, key: Any, value: dict) -> Path:
    """Store ``value`` under ``key`` atomically (write a temporary file, then rename)."""
    path = _path(kind, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"format": FORMAT, "key": key, "value": value}, f, indent=1)
    os.replace(tmp, path)
    return path
