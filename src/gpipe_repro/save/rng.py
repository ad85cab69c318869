"""Every random-number stream a rank draws from, as JSON: captured at a save, restored at a resume.

A rank draws dropout masks from torch's CPU generator (and the CUDA generator of its device on a GPU);
Python's ``random`` and NumPy's global generator are not used by the project today but are cheap to
carry, so a data transform that starts using them stays resumable. States are keyed by the rank's
(stage, replica): at the same K and replica count each rank gets back exactly its own streams, so a
resumed run draws the same dropout masks as an uninterrupted one.

At another K (or replica count) there is no rank to give a stage's stream to: the dropout stream of
a layer depends on which layers share its rank, so even two uninterrupted runs at different K draw
different masks. Each rank is then *reseeded*: all its generators are seeded from a hash of the
save's (stage 0, replica 0) torch state and the new (stage, replica). The continuation is
deterministic (the same save resumed twice at the same layout gives the same run) and its masks are
as random as any, but they are not the masks the run at the old K would have drawn.
"""

from __future__ import annotations

import base64
import hashlib
import random
from typing import Any

import numpy as np
import torch

__all__ = ["capture", "restore", "reseed", "derived_seed"]


def _b64(t: torch.Tensor) -> str:
    return base64.b64encode(t.cpu().numpy().tobytes()).decode("ascii")


def _bytes_tensor(s: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(s)), dtype=torch.uint8).clone()


def capture(device: torch.device | str = "cpu") -> dict[str, Any]:
    """This process's generator states: torch CPU, CUDA of ``device`` (if CUDA), Python, NumPy."""
    dev = torch.device(device)
    version, words, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    return {
        "torch": _b64(torch.get_rng_state()),
        "cuda": _b64(torch.cuda.get_rng_state(dev)) if dev.type == "cuda" else None,
        "python": {"version": version, "state": list(words), "gauss": gauss},
        "numpy": {
            "kind": kind,
            "keys": [int(k) for k in keys],
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
    }


def restore(state: dict[str, Any], device: torch.device | str = "cpu") -> None:
    """Set every generator to ``state`` (from :func:`capture`)."""
    dev = torch.device(device)
    torch.set_rng_state(_bytes_tensor(state["torch"]))
    if dev.type == "cuda" and state.get("cuda") is not None:
        torch.cuda.set_rng_state(_bytes_tensor(state["cuda"]), dev)
    py = state["python"]
    random.setstate((py["version"], tuple(py["state"]), py["gauss"]))
    n = state["numpy"]
    np.random.set_state(
        (n["kind"], np.array(n["keys"], dtype=np.uint32), n["pos"], n["has_gauss"], n["cached"])
    )


def derived_seed(material: str, stage: int, replica: int) -> int:
    """A 63-bit seed from a saved state and a (stage, replica); deterministic across processes."""
    digest = hashlib.sha256(f"{material}|{stage}|{replica}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def reseed(material: str, stage: int, replica: int) -> int:
    """Seed every generator of this rank from ``material`` and its (stage, replica); returns the seed."""
    seed = derived_seed(material, stage, replica)
    torch.manual_seed(seed)  # also seeds every CUDA device
    random.seed(seed)
    np.random.seed(seed % 2**32)
    return seed
