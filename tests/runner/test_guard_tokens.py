"""The memory check counts a translation micro-batch in tokens (batch / max_len sentences of max_len
tokens), not as that many sentences: Table 5's batches pass it on a small host."""

from gpipe_repro.config.compose import compose
from gpipe_repro.config.device import CpuDevice
from gpipe_repro.runner.guard import check_memory
from gpipe_repro.runplan.plan import plan_model, plan_run

GiB = 2**30


def test_token_batches_are_planned_at_their_widest_shape_not_as_sentences():
    small = compose(["experiment=table5", "pipeline.M=1"], cuda_available=False)
    big = compose(["experiment=table5", "pipeline.M=4"], cuda_available=False)
    assert (
        big.train.batch_size == 4 * small.train.batch_size
    )  # micro_batch_size fixed, batch grows with M
    memory = CpuDevice().memory()
    planned_small = check_memory(plan_run(small, plan_model(small), memory))
    planned_big = check_memory(plan_run(big, plan_model(big), memory))
    assert sum(planned_big) < 2 * GiB  # T(2,512,4), 4,096 tokens: far below a host's memory
    assert sum(planned_big) > sum(
        planned_small
    )  # four micro-batches alive in the fill-drain schedule
