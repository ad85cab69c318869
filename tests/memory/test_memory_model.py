"""The memory model (fake tensors, nothing allocated) against what the engine measures on this CPU, fp32 and bf16."""

import sys

import _memory_grid as mg
import pytest
import torch
from torch import nn

from gpipe_repro.config.compose import compose
from gpipe_repro.engine import PRECISIONS, launch
from gpipe_repro.memory.activations import measure_stage
from gpipe_repro.memory.table1 import GiB, plan_amoebanet, plan_transformer
from gpipe_repro.runner import plan
from gpipe_repro.runplan.plan import plan_model

AMOEBA = ["model=amoebanet_d", "model.L=6", "model.D=16", "data=synthetic", "data.image_size=32"]
TRANSFORMER = [
    *["model=transformer_lm", "model.L=4", "model.d=32", "model.H=64", "model.A=2"],
    *["data=synthetic", "data.kind=tokens", "data.seq_len=16", "data.vocab=50"],
]
# (model, checkpoint, schedule, precision): every cell runs in the one launch of ``engine``.
AMOEBA_CELLS = [
    (c, s, p)
    for c, s in [("never", "gpipe"), ("always", "gpipe"), ("except_last", "1f1b")]
    for p in PRECISIONS
]
TRANSFORMER_CELLS = [(c, "gpipe", p) for c in ("never", "always") for p in PRECISIONS]
CELLS = [("amoebanet_d", *c) for c in AMOEBA_CELLS] + [
    ("transformer_lm", *c) for c in TRANSFORMER_CELLS
]


def _spec(model, checkpoint, schedule, precision):
    amoeba = model == "amoebanet_d"
    K, M, N, balance = (2, 4, 16, "[4,8]") if amoeba else (2, 2, 8, "[3,3]")
    return compose(
        [
            *(AMOEBA if amoeba else TRANSFORMER),
            f"pipeline.K={K}",
            f"pipeline.M={M}",
            f"pipeline.checkpoint={checkpoint}",
            f"pipeline.balance={balance}",
            f"pipeline.schedule={schedule}",
            f"train.precision={precision}",
            f"train.batch_size={N}",
            "train.steps=2",
            "train.warmup_steps=1",
            "train.progress=false",
            "train.eval=false",
            "optim=rmsprop",
            "logger=none",
            "device=cpu",
        ],
        cuda_available=False,
    )


def _cell(item: pytest.Item) -> tuple[str, ...] | None:
    """The grid cell a test of this file checks (None: not a grid test)."""
    params = getattr(item, "callspec", None)
    if item.module is not sys.modules[__name__] or params is None:
        return None
    model = "amoebanet_d" if "amoebanet" in item.name else "transformer_lm"
    p = params.params
    return (model, p["checkpoint"], p["schedule"], p["precision"])


@pytest.fixture(scope="module")
def engine(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, ...], list]:
    """What the engine measures per stage for every cell this session checks (``make test`` leaves
    the cells listed in tests/conftest.py to ``make test-long``): one launch of two ranks runs them
    all."""
    wanted = {_cell(item) for item in request.session.items}
    cells = [cell for cell in CELLS if cell in wanted]
    root = tmp_path_factory.mktemp("grid")
    jobs = []
    for i, cell in enumerate(cells):
        spec = _spec(*cell)
        (root / str(i)).mkdir()
        jobs.append((spec, plan(spec, plan_model(spec)), str(root / str(i))))
    per_rank = launch(mg.grid, 2, (jobs,), threads=1)
    return {
        cell: sorted((rank[i] for rank in per_rank), key=lambda r: r.stage)
        for i, cell in enumerate(cells)
    }


@pytest.mark.slow
@pytest.mark.parametrize("checkpoint,schedule,precision", AMOEBA_CELLS)
def test_amoebanet_plan_matches_engine_within_10_percent(engine, checkpoint, schedule, precision):
    bal = [4, 8]
    stages = engine["amoebanet_d", checkpoint, schedule, precision]
    assert [st.stage for st in stages] == [0, 1]
    plan_ = plan_amoebanet(
        6,
        16,
        2,
        4,
        checkpoint,
        16,
        8 * GiB,
        schedule,
        image_size=32,
        classes=10,
        balance=bal,
        precision=precision,
    )
    for st, act, state in zip(stages, plan_.activation, plan_.state, strict=True):
        assert act == pytest.approx(st.activation_bytes, rel=0.10), (
            st.stage,
            act,
            st.activation_bytes,
        )
        assert state == st.param_bytes + st.grad_bytes + st.optimizer_bytes


@pytest.mark.slow
@pytest.mark.parametrize("checkpoint,schedule,precision", TRANSFORMER_CELLS)
def test_transformer_plan_matches_engine_within_10_percent(engine, checkpoint, schedule, precision):
    bal = [3, 3]
    stages = engine["transformer_lm", checkpoint, schedule, precision]
    assert [st.stage for st in stages] == [0, 1]
    plan_ = plan_transformer(
        4,
        2,
        2,
        checkpoint,
        8,
        16 * GiB,
        d=32,
        H=64,
        A=2,
        V=50,
        S=16,
        balance=bal,
        precision=precision,
    )
    for st, act in zip(stages, plan_.activation, strict=True):
        assert act == pytest.approx(st.activation_bytes, rel=0.10), (
            st.stage,
            act,
            st.activation_bytes,
        )


def test_remat_shrinks_the_planned_activations_as_the_paper_says():
    never = plan_amoebanet(6, 16, 1, 8, "never", 64, 8 * GiB, image_size=32, classes=10)
    always = plan_amoebanet(6, 16, 1, 8, "always", 64, 8 * GiB, image_size=32, classes=10)
    assert always.activation[0] < never.activation[0] / 3


def test_a_budget_too_small_for_one_layer_names_the_layer():
    plan = plan_transformer(4, 2, 1, "never", 32, GiB // 4)
    assert not plan.fits
    assert "layer 0 (Embed) alone needs" in plan.oversized


def test_a_model_too_large_is_reported_not_fitting():
    plan = plan_amoebanet(18, 2048, 1, 1, "never", 128, 8 * GiB)
    assert not plan.fits and plan.param_count > 1e9


def test_batch_not_divisible_is_one_line():
    with pytest.raises(ValueError, match="M=3 does not divide the mini-batch of 32"):
        plan_transformer(4, 2, 3, "always", 32, 16 * GiB)


def test_bf16_halves_saved_activations_and_counts_the_weight_copies_apart():
    """Two Linear-ReLU blocks of a later stage (its input in the compute dtype): fp32 saves the ReLU
    outputs in fp32; bf16 saves them in bf16, plus autocast's bf16 copy of each weight (2 bytes per
    weight, whatever the batch)."""
    with torch.device("meta"):
        layers = [nn.Sequential(nn.Linear(64, 64), nn.ReLU()) for _ in range(2)]
    acts = {}
    for p, dtype in zip(PRECISIONS, (torch.float32, torch.bfloat16)):
        for batch in (8, 16):
            x = torch.empty(batch, 64, device="meta", dtype=dtype)
            acts[p, batch], _ = measure_stage(layers, x, precision=p)
    assert acts["fp32", 8].weights == 0
    assert acts["bf16", 8].weights == acts["bf16", 16].weights == 2 * 2 * 64 * 64
    assert 2 * acts["bf16", 8].saved == acts["fp32", 8].saved  # same tensors, half the bytes
    assert 2 * acts["bf16", 8].input == acts["fp32", 8].input  # a later stage receives bf16
    assert acts["bf16", 16].saved == 2 * acts["bf16", 8].saved  # the rest scales with the batch


def test_the_planner_sees_the_engines_attention_not_the_meta_fallback():
    """On CPU, attention saves its output and log-sum-exp, never the S x S probabilities that a
    meta-device run's math fallback would: the plan grows linearly in S, not quadratically."""
    from gpipe_repro.models.transformer import transformer_lm_layers

    with torch.device("meta"):
        layer = transformer_lm_layers(1, d=32, H=64, A=2, V=50)[1]
    per_token = [
        measure_stage([layer], torch.empty(1, S, 32, device="meta"))[0].saved / S
        for S in (256, 1024)
    ]
    assert per_token[1] == pytest.approx(per_token[0], rel=0.01)
