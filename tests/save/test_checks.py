"""A save of another model, size or optimiser fails with one line naming what differs."""

import _save_ranks as r
import pytest
import torch

from gpipe_repro.save import SaveError, load, open_save


def fails(fn, *args, **kw) -> str:
    with pytest.raises(SaveError) as info:
        fn(*args, **kw)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


def test_another_model(k1_save):
    layers = r.build()
    msg = fails(load, k1_save, layers, 0, model=r.record(name="mlp"))
    assert msg == "the save is of tuplenet, this run's model is mlp"


def test_another_size_names_the_config_value(k1_save):
    layers = r.build()
    msg = fails(load, k1_save, layers, 0, model=r.record(channels=16))
    assert msg == "the save is of tuplenet with model.channels=8, this run has model.channels=16"


def test_another_shape_names_the_parameter(k1_save):
    torch.manual_seed(0)
    layers = r.tuplenet_layers(3, 16, 6, 5, batchnorm=True)  # no record: the shapes are checked
    msg = fails(load, k1_save, layers, 0)
    assert (
        msg
        == "parameter layers.0.conv.weight has shape [8, 3, 3, 3] in the save and [16, 3, 3, 3] here"
    )


def test_another_optimiser(k1_save):
    layers = r.build()
    opt = torch.optim.Adam([p for m in layers for p in m.parameters()])
    msg = fails(load, k1_save, layers, 0, optimizer=opt, model=r.record())
    assert msg == "the save's optimiser is rmsprop, this run's is adam"
    assert not opt.state  # nothing was loaded


def test_a_failed_check_loads_nothing(k1_save):
    layers = r.build(seed=5)
    before = [t.clone() for m in layers for t in m.state_dict().values()]
    fails(load, k1_save, layers, 0, model=r.record(classes=7))
    after = [t for m in layers for t in m.state_dict().values()]
    assert all(torch.equal(a, b) for a, b in zip(before, after))


def test_a_slice_beyond_the_saved_layers(k1_save):
    head = r.build()[7:]
    msg = fails(load, k1_save, head, 8)  # as layer 8: the save holds 0..7
    assert msg == "parameter layers.8.fc.weight is not in the save (it holds layers 0..7)"


def test_the_record_is_in_the_save(k1_save):
    meta = open_save(k1_save).meta
    assert meta["model"] == r.record()
    assert meta["optimizer"]["name"] == "rmsprop"
    assert meta["optimizer"]["param_groups"][0]["lr"] == 0.01


def test_run_differences_name_batch_data_order_and_model():
    from gpipe_repro.save.record import describe_model, run_differences

    options = {"channels": 8}
    saved = {"model": describe_model("tuplenet", options, [])}
    saved["run_config"] = {"train": {"batch_size": 32}, "seed": 0, "data": {"name": "x", "n": 1}}
    run = {
        "train": {"batch_size": 32},
        "seed": 0,
        "data": {"name": "x", "n": 1},
        "model": {"name": "tuplenet", **options},
    }
    assert run_differences(saved, run) == {}
    other = {
        **run,
        "train": {"batch_size": 64},
        "seed": 1,
        "data": {"name": "x", "n": 2},
        "model": {"name": "tuplenet", "channels": 16},
    }
    assert run_differences(saved, other) == {
        "batch_size": {"train.batch_size": [32, 64]},
        "data": {"seed": [0, 1], "data.n": [1, 2]},
        "model": {"model.channels": [8, 16]},
    }
    assert run_differences(saved, {**run, "model": {"name": "mlp"}})["model"] == {
        "model": ["tuplenet", "mlp"]
    }
    assert run_differences({"model": saved["model"]}, other).keys() == {"model"}  # no run config
