"""Shared test settings: no wandb network; the suite runs on the CPU unless asked for the GPU tests.

A plain ``pytest`` (``make test``) hides every GPU from torch — here and in every process a test
starts — so ``device=auto`` resolves to the CPU and a GPU host runs the same suite as a CPU host.
``pytest -m gpu`` (``make gpu-check``) leaves the GPUs visible; without CUDA the gpu tests skip.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("WANDB_SILENT", "true")


def asks_for_gpu(markexpr: str) -> bool:
    """Whether ``-m`` selects the gpu tests (``gpu``, ``gpu and not slow``; not ``not gpu``)."""
    words = markexpr.replace("(", " ").replace(")", " ").split()
    return any(w == "gpu" and (i == 0 or words[i - 1] != "not") for i, w in enumerate(words))


def pytest_configure(config: pytest.Config) -> None:
    if not asks_for_gpu(config.getoption("markexpr") or ""):
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before anything initialises CUDA


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One intra-op thread, as a rank has, restored afterwards. A test that times layers needs it: with
    two threads a layer called after a wait (a sleep, a receive) first wakes the idle worker thread,
    milliseconds on this machine, so its timings would depend on the thread count the tests before it
    left behind."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, one_thread: None) -> Path:
    """A profile cache of the test's own (``GPIPE_CACHE``) and one intra-op thread, as a rank has
    (a thread count is part of a profile's key)."""
    monkeypatch.setenv("GPIPE_CACHE", str(tmp_path))
    return tmp_path


@pytest.fixture(scope="session")
def k2_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of the ``K2_RUN`` job (tests/_shared.py), run once for the session through
    ``gpipe-run``: the files of a run (tests/test_cli.py) and the reference the other launchers must
    equal bit for bit (tests/test_multinode.py) — one launch for both, also when pytest-xdist's
    workers run the two files (``make test``): the first worker that needs it runs it into the
    folder the session's workers share (their temporary folders' parent), under a file lock, and
    the others wait for it there. Its users only read it."""
    from _shared import K2_RUN, gpipe_run  # here: after pytest_configure has hidden the GPUs

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    out, done = shared / "k2_run", shared / "k2_run.ok"
    with (shared / "k2_run.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
        if not done.exists():
            if out.exists():  # a worker's launch that failed: its folder holds a failed run
                shutil.rmtree(out)
            r = gpipe_run(*K2_RUN, f"hydra.run.dir={out}")
            assert r.returncode == 0, r.stderr[-2000:]
            done.touch()
    return out


# Tests marked ``long`` here (``make test-long``, not ``make test``): the minutes-long end-to-end runs
# and the larger cells of grids whose small cells stay in ``make test`` — measured with
# ``pytest --durations`` (seconds on 2 idle cores), so that ``make test`` stays near ten minutes.
LONG = (
    "tests/runner/test_soak.py::",  # 100 s: the short soak (make soak is the long one)
    "tests/faults/test_faults.py::test_sigterm_stops_the_whole_sweep",  # 62 s
    "tests/faults/test_faults.py::test_a_second_signal_stops_at_once",  # 13 s
    "tests/faults/test_faults.py::test_concurrent_runs_never_share_a_folder",  # 12 s
    "tests/engine/test_keyed_draws.py::test_with_dropout_any_k_and_remat_is_bit_identical_for_every_model",  # 41 s (the MLP's K-invariance stays: test_pipeline)
    "tests/config/test_compose.py::test_every_experiment_runs_two_steps[t",  # 7-12 s each; demo stays
    "tests/config/test_compose.py::test_every_job_of_every_experiment_composes_and_validates[table2",  # 19 s each
    "tests/config/test_compose.py::test_every_job_of_every_experiment_composes_and_validates[table3",  # 7-9 s each
    "tests/engine/test_events.py::test_measured_bubble_matches_formula[4-",  # 16-19 s each (contended; 21-24 s at 0.4 s cells); K = 2 stays
    "tests/engine/test_events.py::test_measured_bubble_matches_formula[2-1-",  # 10 s (contended)
    "tests/test_multinode.py::test_submitit_local_one_task_per_rank",  # 18 s (torchrun's stays)
    "tests/test_multinode.py::test_the_tasks_of_a_slurm_job",  # 22 s contended (torchrun's stays)
    "tests/paper/test_table1.py::test_transformer_columns_report",  # 17 s
    "tests/models/test_models_in_engine.py::test_amoebanet_d_small_learns_mnist_at_k2",  # 19 s
    "tests/paper/validate_sim/test_validate_sim.py::test_the_validation_pipeline_writes_its_report",  # 23 s
    "tests/test_cli.py::test_multirun_gathers_every_job_failed_ones_too",  # 15 s
    "tests/engine/test_precision.py::",  # 30 s of K = 1, 2, 4 runs in its fixture (fp32 across K: test_pipeline)
    "tests/engine/test_hostmem.py::test_retain_removes_steady_state_page_faults",  # 11 s, a measurement
    "tests/faults/test_faults.py::test_divergence_is_reported_as_diverged",  # 7 s
    "tests/paper/test_validate_hw.py::test_the_command_checks_this_cpus_roofline_per_layer_kind",  # 45 s
    "tests/paper/test_table1.py::test_the_largest_amoebanet_that_fits_is_maximal",  # 4 x 2 AmoebaNet plans
    "tests/sim/test_backend.py::test_measured_hardware_through_gpipe_run",  # ~30 s (contended)
    "tests/faults/test_faults.py::test_sigint_of_a_one_process_run",  # 8 s (Ctrl-C: the K = 2 and sweep tests)
    # half the memory model's grid (one launch runs the cells a session checks): each model keeps a
    # cell of each remat mode and each precision in make test
    "tests/memory/test_memory_model.py::test_amoebanet_plan_matches_engine_within_10_percent[never-gpipe-bf16]",
    "tests/memory/test_memory_model.py::test_amoebanet_plan_matches_engine_within_10_percent[always-gpipe-fp32]",
    "tests/memory/test_memory_model.py::test_amoebanet_plan_matches_engine_within_10_percent[except_last-1f1b-bf16]",
    "tests/memory/test_memory_model.py::test_transformer_plan_matches_engine_within_10_percent[never-gpipe-bf16]",
    "tests/memory/test_memory_model.py::test_transformer_plan_matches_engine_within_10_percent[always-gpipe-fp32]",
    # 83 s since the memory planner counts backward's working set (24 s before, 129 s before LiveBytes
    # swept lazily): gpipe-plan's exact rows of a paper-size AmoebaNet; the all-reduce's effect on
    # the pick stays in make test: tests/sim/test_allreduce.py
    "tests/search/test_allreduce_plan.py::test_a_slow_link_flips_the_pick_away_from_eight_replicas",
    "tests/faults/test_faults.py::test_a_run_that_cannot_fit",  # 7 s (the guard in-process: tests/runner/test_memory_guard.py; exit 1 in one line: test_bad_input)
)


# Tests marked ``timed`` here: their assertions read wall-clock times (layers profiled, a bubble
# measured, a step timed against a sleep). `make test` runs them on their own after the other tests,
# which run on two workers: a second worker's load made a 0.1-ms layer's timings jitter past the
# profiler's checks (tests/sim/test_measure.py failed one two-worker CI run in three).
TIMED = (
    "tests/sim/test_measure.py::",
    "tests/sim/test_stream.py::",
    "tests/sim/test_backend.py::",
    "tests/sim/test_speed.py::",
    "tests/sim/test_distinct.py::",  # profiles tiny layers (the recompute check)
    "tests/sim/test_hardware.py::test_a_measured_profile",
    "tests/engine/test_events.py::test_measured_bubble_matches_formula",
    "tests/engine/test_fifo.py::test_a_wait_is_bounded",
    "tests/rank/test_rank_run.py::",
    "tests/measure/test_emulate.py::",
    "tests/measure/test_ranks.py::",
)


# Tests marked ``slow`` here, by cost (`make test` runs them; `make test-fast` leaves them out): the
# not-slow tests of 5 s or more in a serial `pytest --durations=0` at e759e34 (seconds there).
SLOW = (
    "tests/search/test_gpipe_plan.py::test_the_bound_stays_below_every_simulated_step_under_remat",  # 19
    "tests/test_cli.py::test_two_stage_run_writes_complete_metrics",  # 10 (the K = 2 run's fixture)
    "tests/test_cli.py::test_wandb_offline_run_has_a_live_history_and_the_timeline",  # 10
    "tests/paper/test_table1.py::test_a_budget_too_small_names_the_layer",  # 9
    "tests/paper/test_stats.py::test_the_detectable_effect_is_detected_four_times_in_five",  # 8
    "tests/runner/test_transfer.py::test_the_body_loads_from_the_save_and_the_head_is_new",  # 8
    "tests/studies/test_sensitivity.py::test_the_partition_study_cuts_by",  # 7
    "tests/config/test_compose.py::test_every_experiment_runs_two_steps[fig3_tricks]",  # 7
    "tests/config/test_compose.py::test_every_job_of_every_experiment_composes_and_validates[fig3",  # 5-7
    "tests/config/test_compose.py::test_every_job_of_every_experiment_composes_and_validates[table5]",  # 6
    "tests/engine/test_comm.py::test_a_stem_pair_across_a_boundary_updates_bit_for_bit",  # 6
    "tests/engine/test_fifo.py::test_the_engine_on_one_group_hangs_in_nccl_order",  # 6 each
    "tests/search/test_auto_plan.py::test_a_real_run_with_plan_auto_runs_gpipe_plan_pick",  # 6
    "tests/search/test_per_stage_remat.py::test_a_per_stage_vector_keeps_the_losses_bit_identical",  # 5
    # two workers at 7f2a791 (each starts a fresh interpreter that launches ranks)
    "tests/engine/test_launch.py::test_each_launch_runs_its_ranks_in_the_launchers_environment",  # 5
    "tests/engine/test_launch.py::test_ranks_end_soon_after_their_launcher_is_killed",  # 4
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    long, timed, slow = pytest.mark.long, pytest.mark.timed, pytest.mark.slow
    for item in items:
        if item.nodeid.startswith(LONG):
            item.add_marker(long)
        if item.nodeid.startswith(TIMED):
            item.add_marker(timed)
        if item.nodeid.startswith(SLOW):
            item.add_marker(slow)
    # Tests that need the internet run only when asked for (-m network, make test-network).
    if "network" not in (config.getoption("markexpr") or ""):
        # the marker itself: ``item.keywords`` also holds the names of the folders above a test (a
        # checkout in a folder named ``gpu`` would mark every test)
        offline = [item for item in items if item.get_closest_marker("network") is None]
        if len(offline) < len(items):
            config.hook.pytest_deselected(
                items=[i for i in items if i.get_closest_marker("network") is not None]
            )
            items[:] = offline
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)
