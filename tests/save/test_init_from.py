"""init_from: the body of a save loads into a model with another head; the head stays fresh."""

import _save_ranks as r
import pytest
import torch

from gpipe_repro.save import SaveError, load_weights, open_save
from gpipe_repro.save.keys import layer_tensors


@pytest.mark.parametrize("balance", [[8], [4, 4], [1, 6, 1]])
def test_body_loads_and_the_new_head_keeps_its_initialisation(k1, balance):
    k1_save, want = k1["path"], k1["state"]
    layers = r.build(seed=3, classes=7)  # a new task with 7 classes
    fresh_head = {k: t.clone() for k, t in layer_tensors(layers[7:], 7).items()}
    loaded, skipped, offset = [], [], 0
    for n in balance:  # each stage loads its own slice, no process group
        report = load_weights(
            k1_save, layers[offset : offset + n], offset, skip=[7], model=r.record(classes=7)
        )
        loaded += report.loaded
        skipped += report.skipped
        assert report.rng == "untouched" and report.step == 2
        offset += n
    got = layer_tensors(layers, 0)
    assert sorted(skipped) == sorted(fresh_head)
    assert sorted(loaded) == sorted(
        k for k in want if k.startswith("layers.") and not k.startswith("layers.7.")
    )
    for k in loaded:
        assert torch.equal(got[k], want[k]), k
    for k, t in fresh_head.items():
        assert torch.equal(got[k], t), k


def test_a_head_of_another_shape_must_be_skipped(k1_save):
    layers = r.build(seed=3, classes=7)
    with pytest.raises(SaveError) as info:
        load_weights(k1_save, layers, 0, model=r.record(classes=7))
    assert str(info.value) == (
        "the save is of tuplenet with model.classes=5, this run has model.classes=7: "
        "parameter layers.7.fc.weight has shape [5, 8] in the save and [7, 8] here"
    )
    with pytest.raises(SaveError, match="the save is of tuplenet, this run's model is mlp"):
        load_weights(k1_save, layers, 0, skip=[7], model=r.record(classes=7, name="mlp"))
    with pytest.raises(ValueError, match=r"skip=\[-1\] is invalid"):
        load_weights(k1_save, layers, 0, skip=[-1])
    assert open_save(k1_save).meta["model"]["config"]["classes"] == 5


def test_another_size_names_both_sizes_and_the_first_tensor(k1_save):
    torch.manual_seed(0)
    layers = r.tuplenet_layers(3, 16, 6, 7, batchnorm=True)
    with pytest.raises(SaveError) as info:
        load_weights(k1_save, layers, 0, skip=[7], model=r.record(classes=7, channels=16))
    assert str(info.value) == (
        "the save is of tuplenet with model.channels=8, model.classes=5, this run has "
        "model.channels=16, model.classes=7: parameter layers.0.conv.weight has shape "
        "[8, 3, 3, 3] in the save and [16, 3, 3, 3] here"
    )
