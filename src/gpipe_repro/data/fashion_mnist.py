"""Fashion-MNIST (Xiao, Rasul & Vollgraf 2017): 60,000 + 10,000 real 28x28 clothing images, offline.

The Table 4 transfer experiments run on it (GPIPE.md §7; the paper's CIFAR/ImageNet sets are not
available offline). The original idx files come from the user's copy (``root=``: the files
themselves, or torchvision's ``FashionMNIST/raw`` layout) or else from Debian's
``dataset-fashion-mnist`` package, fetched once into the data cache (``debian.fetch_package``).

idx format (LeCun et al., the MNIST page): 2 zero bytes, a type byte (0x08 = unsigned byte), the
number of dimensions, then each dimension as a big-endian uint32, then the values in C order.
"""

from __future__ import annotations

import gzip
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..errors import UserError
from ..options import opt
from .base import DataInfo
from .debian import fetch_package
from .image_options import ImageOptions

if TYPE_CHECKING:
    from .loader import ImageDataset

__all__ = [
    "CLASS_NAMES",
    "FashionMNISTConfig",
    "PACKAGE",
    "fashion_mnist",
    "find_idx_dir",
    "load_fashion_mnist",
    "read_idx",
]

PACKAGE = "dataset-fashion-mnist"
CLASS_NAMES = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
]
FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
ROOT_LAYOUTS = (
    "",
    "FashionMNIST/raw",
    "fashion-mnist",
    "fashion_mnist",
    "usr/share/datasets/fashion-mnist",
)


def read_idx(path: Path) -> torch.Tensor:
    """An idx file of unsigned bytes (gzip-compressed or not) as a uint8 tensor of its shape."""
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as err:
            raise UserError(
                f"{path} is a damaged gzip file ({err}); fetch or copy it again"
            ) from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise UserError(
            f"{path} is not an idx file of unsigned bytes (header {raw[:4].hex()}, "
            "expected 0000 08 NN)"
        )
    ndim, offset = raw[3], 4 + 4 * raw[3]
    if len(raw) < offset:
        raise UserError(f"{path}: idx header announces {ndim} dimensions but the file ends first")
    dims = struct.unpack(f">{ndim}I", raw[4:offset])
    if len(raw) - offset != math.prod(dims):
        raise UserError(
            f"{path}: idx header says shape {dims} ({math.prod(dims)} bytes) but the file "
            f"holds {len(raw) - offset}"
        )
    return torch.from_numpy(np.frombuffer(raw, np.uint8, offset=offset).reshape(dims).copy())


def _file(folder: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz"):  # the plain file is faster to read
        if (folder / name).is_file():
            return folder / name
    return None


def _complete(folder: Path) -> bool:
    return all(_file(folder, stem) for pair in FILES.values() for stem in pair)


def find_idx_dir(root: Path) -> Path | None:
    """The folder under ``root`` holding the four idx files, in the layouts users have; else None."""
    for sub in ROOT_LAYOUTS:
        if _complete(root / sub):
            return root / sub
    return None


def _from_package(cache: str | None) -> Path:
    tree = fetch_package(
        PACKAGE, cache=cache, hint="set data.root=/path/with/the/Fashion-MNIST idx files"
    )
    for hit in sorted(tree.rglob("train-images-idx3-ubyte*")):
        if _complete(hit.parent):
            return hit.parent
    raise UserError(
        f"the Debian package {PACKAGE} extracted to {tree} holds no complete set of idx "
        f"files; remove {tree} to fetch it again, or set data.root=/path/with/the/idx files"
    )


def load_fashion_mnist(
    root: str | Path | None = None, cache: str | None = None
) -> tuple[dict[str, tuple[torch.Tensor, torch.Tensor]], Path]:
    """``{"train": (images, labels), "test": ...}`` (uint8 ``(N, 1, 28, 28)``, int64) and their folder."""
    if root:
        base = Path(root).expanduser()
        folder = find_idx_dir(base)
        if folder is None:
            where = ", ".join(str(base / s) if s else str(base) for s in ROOT_LAYOUTS[:3])
            raise UserError(
                f"data.root={str(root)!r}: fashion_mnist not found; expected "
                f"{FILES['train'][0]}[.gz] and the other 3 idx files in {where} (or unset "
                f"data.root to fetch Debian's {PACKAGE})"
            )
    else:
        folder = _from_package(cache)
    out: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for split, (images_stem, labels_stem) in FILES.items():
        images_path, labels_path = _file(folder, images_stem), _file(folder, labels_stem)
        assert images_path is not None and labels_path is not None  # _complete checked them
        images, labels = read_idx(images_path), read_idx(labels_path)
        if images.dim() != 3 or labels.dim() != 1 or images.shape[0] != labels.shape[0]:
            raise UserError(
                f"{images_path} {tuple(images.shape)} and {labels_path} "
                f"{tuple(labels.shape)} are not N images with N labels"
            )
        if labels.numel() and int(labels.max()) >= len(CLASS_NAMES):
            raise UserError(
                f"{labels_path} has label {int(labels.max())}; Fashion-MNIST has 10 classes"
            )
        out[split] = images.unsqueeze(1), labels.long()
    return out, folder


@dataclass
class FashionMNISTConfig(ImageOptions):
    """Fashion-MNIST (60,000 + 10,000 real 28x28 clothing images) from the user's copy (root) or from
    Debian's dataset-fashion-mnist package, fetched once into the data cache (offline afterwards)."""

    name: str = "fashion_mnist"
    root: str | None = opt(
        None,
        "a folder with the idx files (or torchvision's FashionMNIST/raw); null = "
        "fetch the Debian package",
    )
    cache: str | None = opt(
        None, "the data cache; null = $GPIPE_DATA_CACHE or ~/.cache/gpipe-repro/data"
    )

    def info(self) -> DataInfo:
        return self.image_info(1, len(CLASS_NAMES))


def fashion_mnist(c: FashionMNISTConfig) -> ImageDataset:
    """Fashion-MNIST as an image dataset with the transfer recipe (flip + cutout) and class subsets.

    E.g. pre-train with ``classes=[0,1,2,3,4]``, fine-tune with ``classes=[5,6,7,8,9],
    per_class=20`` (labels 5-9 become 0-4; the test split is every official test image of 5-9).
    """
    from .loader import from_tensors  # imports torchvision: only when building

    splits, folder = load_fashion_mnist(c.root, c.cache)
    return from_tensors(
        "fashion_mnist",
        splits["train"],
        splits["test"],
        len(CLASS_NAMES),
        **c.loader_kwargs(),
        extra={"files": str(folder)},
    )
