"""The memory planner's walk over the schedules since GPipe against the engine's own accounting.

zb-h1 keeps a micro-batch's graph and the gradients B kept for W from B until W; interleaving holds
its warm-up forwards of every cell of a stage. The planner walks each stage's action list with each
cell's bytes (``memory.activations.peak_activation_bytes``, ``working=False``: the saved-tensor
accounting the engine's meter does), so on a run of ``gpipe-run``'s own path (config, plan, ranks
building their cells) its per-stage peak is the engine's."""

import _memory_grid as mg
import pytest

from gpipe_repro.config.compose import compose
from gpipe_repro.engine import chunk_slices, launch
from gpipe_repro.memory.activations import StageActivation, measure_stage, peak_activation_bytes
from gpipe_repro.runner import plan
from gpipe_repro.runplan.plan import plan_model

MODEL = [
    *["model=transformer_lm", "model.L=4", "model.d=32", "model.H=64", "model.A=2"],
    *["data=synthetic", "data.kind=tokens", "data.seq_len=16", "data.vocab=50"],
]
K, M, N = 2, 4, 8
# (schedule, cells per stage, balance per model cell, remat)
CELLS = [
    ("zb-h1", 1, [3, 3], "never"),
    ("zb-h1", 1, [3, 3], "always"),
    ("interleaved", 2, [1, 2, 2, 1], "never"),
    ("zb-h1", 2, [1, 2, 2, 1], "except_last"),
]


def _spec(schedule, v, balance, checkpoint):
    return compose(
        [
            *MODEL,
            f"pipeline.K={K}",
            f"pipeline.M={M}",
            f"pipeline.schedule={schedule}",
            f"pipeline.virtual_stages={v}",
            f"pipeline.balance=[{','.join(map(str, balance))}]",
            f"pipeline.checkpoint={checkpoint}",
            f"train.batch_size={N}",
            "train.steps=2",
            "train.warmup_steps=1",
            "train.progress=false",
            "train.eval=false",
            "logger=none",
            "device=cpu",
        ],
        cuda_available=False,
    )


def _planned(spec, v, balance, checkpoint, schedule):
    """Each stage's walk with each of its cells' bytes, per micro-batch of N / M samples."""
    model = plan_model(spec)
    n = N // M
    x = model.info.example(n, "meta")
    cells: list[StageActivation] = []
    start = 0
    for b in balance:
        last = start + b == len(model.layers)
        a, x = measure_stage(
            model.layers[start : start + b],
            x,
            model.model.planning_loss if last else None,
        )
        cells.append(a)
        start += b
    out = []
    for k in range(K):
        mine = [cells[s] for s in range(k, K * v, K)]
        assert [sl.stop - sl.start for sl in chunk_slices(balance, K, k)] == [
            balance[s] for s in range(k, K * v, K)
        ]
        out.append(
            peak_activation_bytes(
                mine, schedule, checkpoint, K, M, k, working=False, virtual_stages=v
            )
        )
    return out


@pytest.mark.slow
def test_the_planners_walk_is_the_engines_peak_for_the_later_schedules(tmp_path):
    jobs, specs = [], []
    for i, (schedule, v, balance, checkpoint) in enumerate(CELLS):
        spec = _spec(schedule, v, balance, checkpoint)
        specs.append(spec)
        (tmp_path / str(i)).mkdir()
        jobs.append((spec, plan(spec, plan_model(spec)), str(tmp_path / str(i))))
    per_rank = launch(mg.grid, K, (jobs,), threads=1)
    for i, (schedule, v, balance, checkpoint) in enumerate(CELLS):
        stages = sorted((rank[i] for rank in per_rank), key=lambda r: r.stage)
        planned = _planned(specs[i], v, balance, checkpoint, schedule)
        for st, want in zip(stages, planned, strict=True):
            assert st.activation_bytes == pytest.approx(want, rel=0.05), (
                CELLS[i],
                st.stage,
                st.activation_bytes,
                want,
            )
        # the stage's layers, cell by cell, as ranks of several cells hold them
        assert [len(st.layer_names) for st in stages] == [
            sum(balance[s] for s in range(k, K * v, K)) for k in range(K)
        ]


def test_zero_bubble_holds_the_graph_and_the_kept_gradients_until_w():
    """One stage, no transfers: under zb-h1 a micro-batch's input and output go at B, its graph and
    the gradients kept for W stay until W; a stage holds at most K micro-batches (F to W)."""
    a = StageActivation(input=3, saved=40, output=7, kept=20)
    whole = a.input + a.saved + a.output
    # the last of K = 3 stages: F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 W2 W3; after B2 three micro-batches
    # hold their graph and kept gradients (more than F2's two of them and one whole)
    got = peak_activation_bytes(a, "zb-h1", "never", 3, 4, 2, working=False)
    assert got == 3 * (a.saved + a.kept) > 2 * (a.saved + a.kept) + whole
    # 1f1b's last stage holds one micro-batch at a time
    assert peak_activation_bytes(a, "1f1b", "never", 3, 4, 2, working=False) == whole
