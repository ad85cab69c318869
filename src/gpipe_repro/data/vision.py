"""The paper's image datasets through torchvision, read from a local root (no downloads here).

CIFAR-10/100 (Table 4 transfer) and the transfer sets Oxford-IIIT Pets, Food-101, Stanford Cars and
FGVC Aircraft. Each loader checks the files torchvision expects under ``data.root`` first and, when
they are missing, says what was expected where and where to get it. Training batches come from the
resumable epoch stream of ``loader`` with the transfer recipe of ``augment`` (flip, cutout), drawn
per sample from ``(seed, epoch, index)``; evaluation is resize + normalise.
"""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass
from pathlib import Path
from typing import Any

import torch

from ..errors import UserError
from ..options import opt
from ._torchvision import import_torchvision
from .base import DataInfo, Dataset
from .image_options import ImageOptions

__all__ = ["VISION_SETS", "VisionConfig", "VISION_CONFIGS", "vision"]

# name -> (torchvision class, expected path under root, classes, where to get it)
VISION_SETS: dict[str, tuple[str, str, int, str]] = {
    "cifar10": (
        "CIFAR10",
        "cifar-10-batches-py",
        10,
        "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
    ),
    "cifar100": (
        "CIFAR100",
        "cifar-100-python",
        100,
        "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
    ),
    "oxford_pets": (
        "OxfordIIITPet",
        "oxford-iiit-pet",
        37,
        "https://www.robots.ox.ac.uk/~vgg/data/pets/",
    ),
    "food101": (
        "Food101",
        "food-101",
        101,
        "https://data.vision.ee.ethz.ch/cvl/datasets_extra/food-101/",
    ),
    "stanford_cars": (
        "StanfordCars",
        "stanford_cars",
        196,
        "torchvision StanfordCars layout (devkit, cars_train, cars_test)",
    ),
    "fgvc_aircraft": (
        "FGVCAircraft",
        "fgvc-aircraft-2013b",
        100,
        "https://www.robots.ox.ac.uk/~vgg/data/fgvc-aircraft/",
    ),
}


IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # transfer from ImageNet


@dataclass
class VisionConfig(ImageOptions):
    """One of the paper's image sets, read from a local folder (no downloads):
    gpipe-run data=cifar10 data.root=/path/to/datasets (or set GPIPE_DATA_ROOT)."""

    name: str = "cifar10"
    root: str | None = opt(
        "${oc.env:GPIPE_DATA_ROOT,null}", "folder holding the dataset's torchvision layout"
    )
    image_size: int = opt(32, "images are resized to image_size x image_size", min=8)
    cutout: int = opt(0, "cutout square side in pixels, 0 = off (DeVries & Taylor 2017)", min=0)

    def info(self) -> DataInfo:
        return self.image_info(3, VISION_SETS[self.name][2])

    def check(self) -> None:
        """What can be said without reading the files: is there a root, and the set's folder in it."""
        if not self.root:
            raise UserError(
                f"data.root is not set; {self.name} is read from a local folder: "
                "data.root=/path/to/datasets"
            )
        _, sub, _, url = VISION_SETS[self.name]
        path = Path(self.root).expanduser() / sub
        if not path.exists():
            raise UserError(
                f"data.root={self.root!r}: {self.name} not found; expected {path} (get it from {url})"
            )


# One config class per set: the option's name is its default.
VISION_CONFIGS: dict[str, type] = {
    name: make_dataclass(
        f"{name.title().replace('_', '')}Config",
        [("name", str, field(default=name))],
        bases=(VisionConfig,),
    )
    for name in VISION_SETS
}


class _Images:
    """``source[i]``: image ``i`` of a torchvision dataset built without a transform (a PIL image)."""

    def __init__(self, ds: Any) -> None:
        self.ds = ds

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, i: int) -> Any:
        return self.ds[i][0]


def _source(ds: Any) -> tuple[Any, torch.Tensor, tuple[int, int] | None]:
    """``(images, labels, native size)`` of a torchvision dataset, labels read without decoding images."""
    if hasattr(ds, "data") and hasattr(ds, "targets"):  # CIFAR: uint8 (N, H, W, C) in memory
        images = torch.from_numpy(ds.data).permute(0, 3, 1, 2)
        native = (int(images.shape[2]), int(images.shape[3]))
        return images, torch.as_tensor(ds.targets, dtype=torch.long), native
    if hasattr(ds, "_labels"):  # OxfordIIITPet, Food101, FGVCAircraft
        labels = list(ds._labels)
    elif hasattr(ds, "_samples"):  # StanfordCars: (path, label) pairs
        labels = [s[1] for s in ds._samples]
    else:  # another layout: decode once to read the labels
        labels = [ds[i][1] for i in range(len(ds))]
    return _Images(ds), torch.as_tensor(labels, dtype=torch.long), None


def vision(c: VisionConfig) -> Dataset:
    """One of :data:`VISION_SETS` from ``root`` through the augmenting image loader (``loader``)."""
    name, root, classes, per_class = c.name, c.root, c.classes, c.per_class
    if not root:
        raise UserError(
            f"data.root is not set; {name} is read from a local folder: data.root=/path/to/datasets"
        )
    cls_name, sub, num_classes, url = VISION_SETS[name]
    path = Path(root).expanduser() / sub
    if not path.exists():
        raise UserError(
            f"data.root={root!r}: {name} not found; expected {path} (get it from {url})"
        )
    tv = import_torchvision()
    from .loader import ImageDataset, Split
    from .subset import check_classes, check_per_class, select

    chosen, per = check_classes(classes, num_classes), check_per_class(per_class)
    cls = getattr(tv.datasets, cls_name)
    kw_train, kw_test = (
        ({"train": True}, {"train": False})
        if name.startswith("cifar")
        else ({"split": "trainval" if name == "oxford_pets" else "train"}, {"split": "test"})
    )
    try:
        train_ds = cls(str(Path(root).expanduser()), **kw_train)
        test_ds = cls(str(Path(root).expanduser()), **kw_test)
    except RuntimeError as err:
        raise UserError(f"data.root={root!r}: {name} is incomplete under {path}: {err}") from None
    (x_tr, y_tr, native), (x_te, y_te, _) = _source(train_ds), _source(test_ds)
    tr, te = select(y_tr, chosen, per, c.subset_seed), select(y_te, chosen)
    return ImageDataset(
        name,
        Split(x_tr, tr.indices, tr.labels),
        Split(x_te, te.indices, te.labels),
        classes=len(chosen),
        channels=3,
        image_size=c.image_size,
        mean=IMAGENET_MEAN,
        std=IMAGENET_STD,
        flip=c.flip,
        cutout=c.cutout,
        native=native,
        workers=c.workers,
        worker_timeout_s=c.worker_timeout_s,
        extra={"classes_selected": chosen if classes is not None else None, "per_class": per},
    )
