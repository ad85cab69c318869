"""Fashion-MNIST from idx files: parsing (gzip and plain), the layouts users have, class subsets with
relabelling, seeded labels per class, test split = every official test image of those classes."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import pytest
import torch

from gpipe_repro.data import build_dataset
from gpipe_repro.data.fashion_mnist import find_idx_dir, load_fashion_mnist, read_idx
from gpipe_repro.errors import UserError

PER_CLASS_TRAIN, PER_CLASS_TEST = 6, 3


def _idx(values: torch.Tensor) -> bytes:
    head = struct.pack(">BBBB", 0, 0, 0x08, values.dim()) + struct.pack(
        f">{values.dim()}I", *values.shape
    )
    return head + values.contiguous().numpy().tobytes()


def _write(folder: Path, name: str, values: torch.Tensor, gz: bool) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    data = _idx(values)
    if gz:
        (folder / (name + ".gz")).write_bytes(gzip.compress(data))
    else:
        (folder / name).write_bytes(data)


def _fixture(folder: Path, gz: bool) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    out = {}
    for split, per, stems in (
        ("train", PER_CLASS_TRAIN, ("train-images-idx3-ubyte", "train-labels-idx1-ubyte")),
        ("test", PER_CLASS_TEST, ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")),
    ):
        labels = torch.arange(10).repeat(per)[torch.randperm(10 * per, generator=g)].to(torch.uint8)
        images = torch.randint(0, 256, (10 * per, 28, 28), generator=g, dtype=torch.uint8)
        _write(folder, stems[0], images, gz)
        _write(folder, stems[1], labels, not gz)  # mix compressed and plain files
        out[split] = images, labels
    return out


@pytest.mark.parametrize("gz", [True, False])
def test_idx_files_parse_exactly(tmp_path: Path, gz: bool):
    want = _fixture(tmp_path, gz)
    splits, folder = load_fashion_mnist(root=str(tmp_path))
    assert folder == tmp_path
    for split in ("train", "test"):
        x, y = splits[split]
        assert x.dtype == torch.uint8 and tuple(x.shape[1:]) == (1, 28, 28)
        assert torch.equal(x[:, 0], want[split][0]) and torch.equal(y, want[split][1].long())


def test_torchvision_layout_is_found(tmp_path: Path):
    _fixture(tmp_path / "FashionMNIST" / "raw", gz=True)
    assert find_idx_dir(tmp_path) == tmp_path / "FashionMNIST" / "raw"


def test_malformed_files_are_one_line_errors(tmp_path: Path):
    (tmp_path / "bad").write_bytes(b"\x00\x00\x0d\x01\x00\x00\x00\x02ab")
    with pytest.raises(UserError, match="not an idx file of unsigned bytes"):
        read_idx(tmp_path / "bad")
    (tmp_path / "short").write_bytes(_idx(torch.zeros(5, dtype=torch.uint8))[:-1])
    with pytest.raises(UserError, match=r"says shape \(5,\) \(5 bytes\) but the file holds 4"):
        read_idx(tmp_path / "short")


def test_missing_root_says_what_was_expected(tmp_path: Path):
    with pytest.raises(UserError) as err:
        load_fashion_mnist(root=str(tmp_path / "nowhere"))
    msg = str(err.value)
    assert (
        "\n" not in msg and "fashion_mnist not found; expected train-images-idx3-ubyte[.gz]" in msg
    )
    assert "FashionMNIST/raw" in msg


def _build(root: Path, **kw) -> object:
    return build_dataset("fashion_mnist", {"root": str(root), "cutout": 4, **kw})


def test_class_subset_relabels_and_keeps_all_test_images_of_those_classes(tmp_path: Path):
    want = _fixture(tmp_path, gz=True)
    ds = _build(tmp_path, classes=[5, 6, 7, 8, 9])
    assert ds.info.classes == 5 and ds.info.shape == (1, 28, 28)
    x_tr, y_tr = want["train"]
    assert torch.equal(ds.train.labels, y_tr[ds.train.indices].long() - 5)
    assert len(ds.train) == 5 * PER_CLASS_TRAIN
    x_te, y_te = want["test"]
    assert torch.equal(ds.test.indices, torch.nonzero(y_te >= 5).flatten())
    assert torch.equal(ds.test.labels, y_te[ds.test.indices].long() - 5)
    order = _build(tmp_path, classes=[9, 5])  # the list's order is the new labels' order
    assert torch.equal(order.test.labels, (y_te[order.test.indices] == 5).long())


def test_per_class_subset_is_seeded_balanced_and_disjoint_from_test(tmp_path: Path):
    want = _fixture(tmp_path, gz=False)
    a = _build(tmp_path, classes=[5, 6, 7, 8, 9], per_class=2)
    b = _build(tmp_path, classes=[5, 6, 7, 8, 9], per_class=2)
    c = _build(tmp_path, classes=[5, 6, 7, 8, 9], per_class=2, subset_seed=1)
    assert a.train.labels.bincount().tolist() == [2] * 5
    assert torch.equal(a.train.indices, b.train.indices)
    assert not torch.equal(a.train.indices, c.train.indices)
    assert len(a.test) == 5 * PER_CLASS_TEST  # the test split is not reduced
    train_imgs = {bytes(want["train"][0][i].numpy()) for i in a.train.indices}
    test_imgs = {bytes(want["test"][0][i].numpy()) for i in a.test.indices}
    assert not train_imgs & test_imgs
    x, y = next(a.batches(0, 10, seed=0))
    assert x.shape == (10, 1, 28, 28) and sorted(y.tolist()) == sorted(a.train.labels.tolist())


def test_normalisation_uses_the_whole_training_split(tmp_path: Path):
    _fixture(tmp_path, gz=True)
    pre, fine = _build(tmp_path, classes=[0, 1, 2, 3, 4]), _build(tmp_path, classes=[5, 6, 7, 8, 9])
    assert (
        pre.train_samples.eval_tf.transforms[-1].mean
        == fine.train_samples.eval_tf.transforms[-1].mean
    )


@pytest.mark.parametrize(
    "kw, text",
    [
        ({"classes": [3, 3]}, "data.classes=[3, 3] lists class 3 twice"),
        ({"classes": [10]}, "data.classes=[10]: 10 is not a class; allowed: integers 0..9"),
        ({"classes": "5-9"}, "data.classes='5-9' must be a list"),
        (
            {"per_class": 7},
            f"data.per_class=7 exceeds the {PER_CLASS_TRAIN} training images of class 0",
        ),
        ({"per_class": 0}, "data.per_class=0 is invalid; allowed: an integer >= 1"),
        ({"cutout": 40}, "data.cutout=40 must be an integer from 0"),
        (
            {"flips": True},
            "data.flips is not an option of data=fashion_mnist; allowed: classes, per_class",
        ),
    ],
)
def test_option_errors_name_the_option(tmp_path: Path, kw: dict, text: str):
    _fixture(tmp_path, gz=True)
    with pytest.raises(UserError) as err:
        _build(tmp_path, **kw)
    assert text in str(err.value) and "\n" not in str(err.value)
