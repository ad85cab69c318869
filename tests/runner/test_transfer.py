"""Transfer learning through the harness (compose + run), as Table 4 runs it: pre-train with a save,
fine-tune from it on a target with another class count — the body loads, the head is new — and the
same fine-tune at K = 1 and K = 2. Small AmoebaNet-B on scikit-learn's digits (offline)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gpipe_repro.config.compose import compose
from gpipe_repro.models import materialize
from gpipe_repro.runner import run
from gpipe_repro.runplan.plan import plan_model
from gpipe_repro.save import load_weights, save_path
from gpipe_repro.save.keys import layer_tensors

SMALL = [
    "data=digits_images",
    "data.image_size=16",
    "model.D=4",
    "train.batch_size=8",
    "logger=none",
    "train.progress=false",
    "train.warmup_steps=0",
]
PRE = [
    "experiment=table4_pretrain",
    *SMALL,
    "data.classes=[0,1,2,3,4]",
    "train.steps=3",
    "train.eval=false",
]
TARGET = [
    "experiment=table4_finetune",
    *SMALL,
    "data.classes=[5,6,7]",
    "data.per_class=10",
    "seed=1",
]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pretrain")
    m = run(compose(PRE, cuda_available=False), out)
    assert m is not None and m.status == "ok", m and m.error
    path = save_path(out / "saves", 3)
    assert path.is_dir()
    return path


def _params(spec, layers) -> dict[str, torch.Tensor]:
    """The parameters (not the BatchNorm statistics, which a training step updates) by global key."""
    names = {
        f"layers.{i}.{n}" for i, layer in enumerate(layers) for n, _ in layer.named_parameters()
    }
    return {k: t.clone() for k, t in layer_tensors(layers, 0).items() if k in names}


def _from_save(spec, path: Path) -> dict[str, torch.Tensor]:
    layers = materialize(plan_model(spec).layers, spec.seed)
    load_weights(path, layers, 0)
    return _params(spec, layers)


def test_the_body_loads_from_the_save_and_the_head_is_new(pretrained, tmp_path):
    # lr = 0: the fine-tune's own save after one step holds exactly the weights it started from. At
    # K = 1 only: that K = 2 starts from the same weights is shown by its losses being K = 1's, bit
    # for bit (test_the_fine_tune_is_the_same_at_k1_and_k2), with one K = 2 launch in the file.
    K = 1
    spec = compose(
        [
            *TARGET,
            f"train.init_from={pretrained}",
            "optim.lr=0",
            "train.steps=1",
            "train.save_every=1",
            "train.eval=false",
            f"pipeline.K={K}",
        ],
        cuda_available=False,
    )
    m = run(spec, tmp_path)
    assert m is not None and m.status == "ok", m and m.error
    assert m.pipeline.K == K and len(m.pipeline.balance) == K
    start = _from_save(spec, save_path(tmp_path / "saves", 1))
    saved = _from_save(compose(PRE, cuda_available=False), pretrained)
    fresh = _params(
        spec, materialize(plan_model(spec).layers, spec.seed)
    )  # built with the same seed
    head = len(plan_model(spec).layers) - 1
    body = [k for k in start if not k.startswith(f"layers.{head}.")]
    assert body and all(torch.equal(start[k], saved[k]) for k in body)
    assert not all(torch.equal(start[k], fresh[k]) for k in body)  # the save, not a fresh body
    head_keys = [k for k in start if k.startswith(f"layers.{head}.")]
    weight = next(k for k in head_keys if k.endswith("weight"))
    assert start[weight].shape[0] == 3 and saved[weight].shape[0] == 5  # the target's classes
    assert all(torch.equal(start[k], fresh[k]) for k in head_keys)  # freshly initialised


@pytest.mark.slow
def test_the_fine_tune_is_the_same_at_k1_and_k2(pretrained, tmp_path):
    runs = {}
    for K in (1, 2):
        spec = compose(
            [
                *TARGET,
                f"train.init_from={pretrained}",
                "train.steps=4",
                "pipeline.M=2",
                f"pipeline.K={K}",
            ],
            cuda_available=False,
        )
        runs[K] = run(spec, tmp_path / f"K{K}")
        assert runs[K] is not None and runs[K].status == "ok", runs[K] and runs[K].error
    assert len(runs[1].losses) == 4
    assert runs[1].losses == runs[2].losses  # every step, bit for bit: synchronous updates
    assert runs[1].eval.accuracy == runs[2].eval.accuracy and runs[1].eval.loss == runs[2].eval.loss
    assert runs[1].eval.samples == runs[2].eval.samples > 0


@pytest.mark.parametrize(
    "change,message",
    [
        (
            ["model.D=8"],
            "the save is of amoebanet_b with model.D=4, this run has model.D=8: parameter layers.",
        ),
        (
            ["model=amoebanet_d", "model.D=4"],
            "the save is of amoebanet_b, this run's model is amoebanet_d",
        ),
    ],
)
def test_a_save_of_another_size_or_architecture_fails_in_one_line(
    pretrained, tmp_path, change, message
):
    spec = compose(
        [*TARGET, *change, f"train.init_from={pretrained}", "train.steps=1"], cuda_available=False
    )
    m = run(spec, tmp_path)
    assert m is not None and m.status == "failed"
    assert m.error.startswith(message) and "\n" not in m.error
