"""Activation memory accounting: remat follows the paper's O(N + L/K * N/M), on real gloo ranks."""

import _workers as w
import pytest

from gpipe_repro.engine import launch


@pytest.mark.slow
def test_remat_activation_memory_follows_the_papers_formula():
    # Paper §2.3: without remat a stage keeps all M micro-batches' activations, O(N * L/K);
    # with remat it keeps the M cell inputs plus one micro-batch's activations, O(N + L/K * N/M).
    K, M, N, width, depth = 2, 8, 64, 256, 8
    never = launch(w.memory_run, K, (K, M, "never", N, width, depth))
    always = launch(w.memory_run, K, (K, M, "always", N, width, depth))
    for st in range(K):
        a_never = never[st]["peak"]
        a_always = always[st]["peak"]
        per_mb = a_never / M  # all M micro-batches alive at the end of the forwards
        boundary_mb = (N // M) * width * 4  # one micro-batch's cell input, fp32
        predicted = M * boundary_mb + per_mb
        assert a_always == pytest.approx(predicted, rel=0.10), (st, a_always, predicted)
        assert a_always < 0.35 * a_never


def test_peak_memory_resets_after_warm_up():
    """A run resets the peaks after its warm-up steps, so a large first step does not stay its peak;
    a CPU has no allocator counter (None), the accounted peak is the measure."""
    import torch

    from gpipe_repro.engine import Pipeline, single_process

    torch.manual_seed(0)
    pipe = Pipeline(
        [torch.nn.Linear(32, 32), torch.nn.ReLU()], single_process(), M=2, loss_fn=w.mse
    )
    big, small = torch.randn(64, 32), torch.randn(8, 32)
    pipe.train_step(big, big)
    warm = pipe.peak_activation_bytes
    pipe.train_step(small, small)
    assert pipe.peak_activation_bytes == warm  # the peak of all steps so far
    pipe.reset_peak_memory()
    assert pipe.peak_activation_bytes == 0
    pipe.train_step(small, small)
    assert 0 < pipe.peak_activation_bytes < warm / 4
    assert pipe.allocator_peak_bytes is None
