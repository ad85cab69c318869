"""The options every augmented image dataset shares (the transfer recipe, GPIPE.md §7), as config.

Kept apart from ``loader`` so the config schema can be built without importing torchvision.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..options import opt
from .base import DataInfo

__all__ = ["ImageOptions"]


@dataclass
class ImageOptions:
    """Class subsets, labels per class, the input size and the per-epoch augmentation."""

    classes: list[int] | None = opt(
        None,
        "keep these classes, relabelled 0.. in list order; null = all",
        allowed="null or a list of distinct class indices",
    )
    per_class: int | None = opt(
        None, "training images per class (a fixed, seeded subset); null = all", min=1
    )
    subset_seed: int = opt(0, "seed of the per_class subset (independent of the run's seed)", min=0)
    image_size: int = opt(28, "images are resized to image_size x image_size", min=1)
    flip: bool = opt(True, "random horizontal flip in training (off for digits: it changes 2/5)")
    cutout: int = opt(8, "cutout square side in pixels, 0 = off (DeVries & Taylor 2017)", min=0)
    workers: int = opt(0, "DataLoader worker processes (0 = load in the training process)", min=0)
    worker_timeout_s: float = opt(120.0, "bound on waiting for a worker's batch", min=0)

    def loader_kwargs(self) -> dict[str, Any]:
        return {
            "classes": list(self.classes) if isinstance(self.classes, tuple) else self.classes,
            "per_class": self.per_class,
            "subset_seed": self.subset_seed,
            "image_size": self.image_size,
            "flip": self.flip,
            "cutout": self.cutout,
            "workers": self.workers,
            "worker_timeout_s": self.worker_timeout_s,
        }

    def image_info(self, channels: int, num_classes: int) -> DataInfo:
        n = len(self.classes) if self.classes is not None else num_classes
        return DataInfo("image", (channels, self.image_size, self.image_size), n)
