"""What each schedule buys, asked of the simulator and the memory planner one (schedule, K, M) at a
time (``search.subject.schedule_point``): the question a comparison of schedules on a published
profile asks, answered from the engine's own action lists."""

import pytest

from gpipe_repro.config.compose import compose
from gpipe_repro.engine.errors import ArgumentError
from gpipe_repro.runplan.costing import run_hardware
from gpipe_repro.runplan.plan import plan_model
from gpipe_repro.search.choose import subject
from gpipe_repro.search.subject import schedule_point, space_of

MODEL = [
    *["model=transformer_lm", "model.L=8", "model.d=256", "model.H=1024", "model.A=4"],
    *["data=synthetic", "data.kind=tokens", "data.vocab=1000", "data.seq_len=128"],
    *["hardware=tpu_v3", "backend=sim"],
]
# (schedule, remat, cells per stage): the comparison's rows
ROWS = [
    ("gpipe", "never", 1),
    ("gpipe", "always", 1),
    ("1f1b", "never", 1),
    ("interleaved", "never", 2),
    ("interleaved", "never", 4),
    ("zb-h1", "never", 1),
]


@pytest.fixture(scope="module")
def setting():
    spec = compose(MODEL)
    model = plan_model(spec)
    hw, costs = run_hardware(spec, model)
    s = subject(spec, model)
    return s, hw, space_of(s, hw.memory_bytes, costs)


@pytest.mark.parametrize("K,M", [(2, 4), (2, 8), (4, 8)])
def test_every_schedule_has_its_throughput_and_stage_peaks(setting, K, M):
    s, hw, space = setting
    p = {
        (name, remat, v): schedule_point(
            s, hw, space, K=K, M=M, schedule=name, checkpoint=remat, micro_batch=4, virtual_stages=v
        )
        for name, remat, v in ROWS
        if K * v <= len(s.layers)  # a layer per cell
    }
    for key, point in p.items():
        assert point.samples_per_s > 0 and len(point.stage_bytes) == K, key
        assert len(point.candidate.balance) == K * key[2]
    bubble = {key: point.result.bubble_fraction for key, point in p.items()}
    # interleaving divides the bubble, ZB-H1 fills most of it with W (Megatron-LM §2.2, Qi et al.)
    if ("interleaved", "never", 4) in bubble:
        assert bubble[("interleaved", "never", 4)] < bubble[("interleaved", "never", 2)]
    assert bubble[("interleaved", "never", 2)] < bubble[("1f1b", "never", 1)]
    assert bubble[("zb-h1", "never", 1)] < bubble[("1f1b", "never", 1)]
    # remat keeps inputs only; 1F1B holds K - k micro-batches on stage k, gpipe M
    gpipe, remat = p[("gpipe", "never", 1)], p[("gpipe", "always", 1)]
    assert max(remat.stage_bytes) < max(gpipe.stage_bytes)
    assert p[("1f1b", "never", 1)].stage_bytes[0] < gpipe.stage_bytes[0]


def test_a_schedule_that_cannot_run_is_refused(setting):
    s, hw, space = setting
    with pytest.raises(ArgumentError, match="M=1 cannot run schedule interleaved"):
        schedule_point(
            s,
            hw,
            space,
            K=2,
            M=1,
            schedule="interleaved",
            checkpoint="never",
            micro_batch=4,
            virtual_stages=2,
        )
