"""The paper's image datasets through torchvision, read from a local root (no downloads here).

CIFAR-10/100 (Table 4 transfer) and the transfer sets Oxford-IIIT Pets, Food-101, Stanford Cars and
FGVC Aircraft. Each loader checks the files torchvision expects under ``data.root`` first and, when
they are missing, says what was expected where and where to get it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass
from pathlib import Path

import torch

from ..config.options import opt
from ..errors import UserError
from ._torchvision import import_torchvision
from .base import DataInfo, Dataset

__all__ = ["VISION_SETS", "VisionConfig", "VISION_CONFIGS", "vision"]

# name -> (torchvision class, expected path under root, classes, where to get it)
VISION_SETS: dict[str, tuple[str, str, int, str]] = {
    "cifar10": ("CIFAR10", "cifar-10-batches-py", 10, "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"),
    "cifar100": ("CIFAR100", "cifar-100-python", 100, "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz"),
    "oxford_pets": ("OxfordIIITPet", "oxford-iiit-pet", 37, "https://www.robots.ox.ac.uk/~vgg/data/pets/"),
    "food101": ("Food101", "food-101", 101, "https://data.vision.ee.ethz.ch/cvl/datasets_extra/food-101/"),
    "stanford_cars": ("StanfordCars", "stanford_cars", 196, "torchvision StanfordCars layout (devkit, cars_train, cars_test)"),
    "fgvc_aircraft": ("FGVCAircraft", "fgvc-aircraft-2013b", 100, "https://www.robots.ox.ac.uk/~vgg/data/fgvc-aircraft/"),
}


@dataclass
class VisionConfig:
    """One of the paper's image sets, read from a local folder (no downloads):
    gpipe-run data=cifar10 data.root=/path/to/datasets (or set GPIPE_DATA_ROOT)."""

    name: str = "cifar10"
    root: str | None = opt("${oc.env:GPIPE_DATA_ROOT,null}", "folder holding the dataset's torchvision layout")
    image_size: int = opt(32, "images are resized to image_size x image_size", min=8)
    cutout: int = opt(0, "cutout square side in pixels (0 = off)", min=0)

    def info(self) -> DataInfo:
        return DataInfo("image", (3, self.image_size, self.image_size), VISION_SETS[self.name][2])


# One config class per set: the option's name is its default.
VISION_CONFIGS: dict[str, type] = {
    name: make_dataclass(f"{name.title().replace('_', '')}Config", [("name", str, field(default=name))],
                         bases=(VisionConfig,))
    for name in VISION_SETS
}


class VisionDataset(Dataset):
    def __init__(self, name: str, root: str, image_size: int, cutout: int = 0) -> None:
        cls_name, sub, classes, url = VISION_SETS[name]
        path = Path(root).expanduser() / sub
        if not path.exists():
            raise UserError(f"data.root={root!r}: {name} not found; expected {path} (get it from {url})")
        tv = import_torchvision()
        from torchvision.transforms import v2

        self.name, self.info = name, DataInfo("image", (3, image_size, image_size), classes)
        norm = v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
        aug: list = [v2.RandomHorizontalFlip()]
        if cutout:
            aug.append(v2.RandomErasing(p=1.0, scale=(cutout**2 / image_size**2,) * 2, ratio=(1.0, 1.0)))
        base = [v2.ToImage(), v2.Resize((image_size, image_size)), v2.ToDtype(torch.float32, scale=True), norm]
        cls = getattr(tv.datasets, cls_name)
        kw_train, kw_test = ({"train": True}, {"train": False}) if name.startswith("cifar") else \
            ({"split": "trainval" if name == "oxford_pets" else "train"}, {"split": "test"})
        try:
            self.train = cls(str(Path(root).expanduser()), transform=v2.Compose(base[:3] + aug + base[3:]), **kw_train)
            self.test = cls(str(Path(root).expanduser()), transform=v2.Compose(base), **kw_test)
        except RuntimeError as err:
            raise UserError(f"data.root={root!r}: {name} is incomplete under {path}: {err}") from None

    def train_batch(self, step: int, batch_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(seed * 1_000_003 + step)
        idx = torch.randint(0, len(self.train), (batch_size,), generator=g).tolist()
        torch.manual_seed(seed * 1_000_003 + step)  # augmentation draws
        xs, ys = zip(*(self.train[i] for i in idx))
        return torch.stack(xs), torch.tensor(ys)

    def eval_set(self) -> tuple[torch.Tensor, torch.Tensor]:
        xs, ys = zip(*(self.test[i] for i in range(len(self.test))))
        return torch.stack(xs), torch.tensor(ys)


def vision(c: VisionConfig) -> Dataset:
    if not c.root:
        raise UserError(f"data.root is not set; {c.name} is read from a local folder: data.root=/path/to/datasets")
    return VisionDataset(c.name, c.root, c.image_size, c.cutout)
