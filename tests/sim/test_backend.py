"""The sim backend's contract and inputs: one metrics.json for both backends, backend=auto, bad input."""

from __future__ import annotations

import json
from unittest.mock import patch

import pytest
import torch
from _shared import gpipe_run
from jsonschema import Draft202012Validator

from gpipe_repro.config.compose import compose, preflight
from gpipe_repro.errors import UserError
from gpipe_repro.metrics.contract import load_metrics
from gpipe_repro.metrics.schema import json_schema
from gpipe_repro.paper.sweep import markdown_table
from gpipe_repro.paper.sweep_rows import sweep_rows
from gpipe_repro.runner import plan, run
from gpipe_repro.runner.simulated import simulate_run
from gpipe_repro.runplan import costing
from gpipe_repro.runplan.costing import profile_sizes
from gpipe_repro.runplan.plan import plan_model
from gpipe_repro.sim import measured

MLP = [
    "model=mlp",
    "model.hidden=32",
    "model.depth=2",
    "logger=none",
    "train.progress=false",
    "train.eval=false",
    "train.steps=3",
    "train.warmup_steps=1",
    "train.batch_size=16",
    "pipeline.M=2",
]
SIM = [*MLP, "backend=sim", "hardware=tpu_v3"]


def _keys(d: object, prefix: str = "") -> set[str]:
    """Every key path of a JSON document (list items merged)."""
    out: set[str] = set()
    if isinstance(d, dict):
        for k, v in d.items():
            out |= {f"{prefix}{k}"} | _keys(v, f"{prefix}{k}.")
    elif isinstance(d, list):
        for v in d:
            out |= _keys(v, prefix)
    return out


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """One measured (engine, K=1) and one simulated (TPU v3, K=2) job in one sweep folder."""
    sweep = tmp_path_factory.mktemp("sweep")
    measured = run(compose(MLP, cuda_available=False), sweep / "0_K1-M2")
    simulated = run(compose([*SIM, "pipeline.K=2"], cuda_available=False), sweep / "1_K2-M2")
    assert measured is not None and measured.status == "ok", measured and measured.error
    assert simulated is not None and simulated.status == "ok", simulated and simulated.error
    return {
        "sweep": sweep,
        "measured": json.loads((sweep / "0_K1-M2" / "metrics.json").read_text()),
        "simulated": json.loads((sweep / "1_K2-M2" / "metrics.json").read_text()),
    }


def test_a_simulated_metrics_json_has_every_key_of_a_measured_one_and_fits_the_schema(both):
    meas, sim = both["measured"], both["simulated"]
    assert meas["source"] == "measured" and sim["source"] == "simulated"
    missing = _keys(meas) - _keys(sim) - {f"eval.{k}" for k in ("accuracy", "loss", "samples")}
    # eval: a simulated run trains nothing to evaluate; the measured run here has eval off as well
    assert not missing, missing
    assert (
        sim["hardware"]["name"] == "tpu_v3"
        and sim["pipeline"]["K"] == 2
        and len(sim["stages"]) == 2
    )
    schema = Draft202012Validator(json_schema())
    schema.validate(meas)
    schema.validate(sim)
    for folder in ("0_K1-M2", "1_K2-M2"):  # the same files beside it
        assert {"metrics.json", "trace.json", "timeline.png"} <= {
            p.name for p in (both["sweep"] / folder).iterdir()
        }


def test_a_sweep_mixing_both_gathers_into_one_table(both):
    rows, _ = sweep_rows(both["sweep"])
    assert [(r.source, r.K) for r in rows] == [("measured", 1), ("simulated", 2)]
    # the CPU's name for the measured row
    assert rows[1].hardware == "tpu_v3" and rows[0].hardware
    # each series is normalised to its own smallest cell: the two sources are never divided by each other
    assert [r.normalized_throughput for r in rows] == [1.0, 1.0]
    table = markdown_table(rows)
    assert "| source |" in table and "simulated" in table and "measured" in table


def test_each_stage_records_its_recompute_inside_its_busy_time(both):
    """The time a stage spends recomputing (the early-recompute overlap of Tables 2 and 3 needs it),
    from the engine's events and from the simulator's alike; the sweep row carries it per stage."""
    for key in ("measured", "simulated"):
        m = both[key]
        assert m["pipeline"]["checkpoint"] == "except_last" and m["pipeline"]["M"] == 2
        for s in m["stages"]:  # micro-batch 0 of 2 is recomputed, micro-batch 1 is not
            assert 0 < s["recompute_s"] < s["busy_s"], (key, s)
    rows, _ = sweep_rows(both["sweep"])
    assert [len(r.stage_recompute_s.split(";")) for r in rows] == [1, 2]


@pytest.mark.slow
def test_measured_hardware_through_gpipe_run_is_the_simulation_on_this_cpus_profile(
    tmp_path, monkeypatch
):
    """``backend=sim hardware=measured`` end to end: gpipe-run profiles this CPU (into a cache of the
    test's own) and writes a metrics.json that fits the schema and reads back; its step is what
    ``runner.simulated`` gives for the same config on that profile, which a published profile's
    step is not (a run that ignored the measured profile would fail here). ~30 s of profiling and
    calibration: ``long`` (tests/conftest.py)."""
    # the MLP keeps its BatchNorm1d, which refuses one sample per channel in training: the profile
    # starts at micro-batch 2 for it (it timed 1 and failed before)
    args = [*MLP, "backend=sim", "hardware=measured", "pipeline.K=2"]
    cache, folder = tmp_path / "cache", tmp_path / "run"
    r = gpipe_run(*args, f"hydra.run.dir={folder}", env={"GPIPE_CACHE": str(cache)})
    assert r.returncode == 0, r.stderr[-2000:]
    Draft202012Validator(json_schema()).validate(json.loads((folder / "metrics.json").read_text()))
    m = load_metrics(folder / "metrics.json")
    assert m.status == "ok" and m.source == "simulated" and m.pipeline.K == 2
    assert m.hardware["name"] == "measured" and m.hardware["kind"] == "measured"
    assert any(cache.rglob("*.json")), "the run measured nothing into its cache"
    # In this process, from the run's cache (not from what another test calibrated in it)
    monkeypatch.setenv("GPIPE_CACHE", str(cache))
    monkeypatch.setattr(measured, "_CALIBRATION", {})
    monkeypatch.setattr(measured, "_COSTS", {})
    threads = torch.get_num_threads()  # the profile is timed with the run's threads
    (tmp_path / "again").mkdir()  # the simulated steps' progress file

    def step_s(extra: list[str]) -> float | None:
        spec = compose([*args, *extra], cuda_available=False)
        model = plan_model(spec)
        try:
            simulated, _ = simulate_run(plan(spec, model), model, tmp_path / "again")
        finally:
            torch.set_num_threads(threads)
        return simulated.step_time_s

    assert m.step_time_s is not None and m.step_time_s == step_s([])
    assert m.step_time_s != step_s(["hardware=tpu_v3"])


def test_the_measured_profile_starts_at_two_samples_for_batch_normalisation():
    assert profile_sizes(8) == [1, 2, 4, 8] and profile_sizes(8, smallest=2) == [2, 4, 8]
    seen: list[list[int]] = []

    class Recorder:
        name = "recorder"

        def cost_model(self, workload, sizes, M):
            seen.append(list(sizes))

    for norm, first in (("true", 2), ("false", 1)):
        spec = compose([*MLP, f"model.batchnorm={norm}", "hardware=measured"], cuda_available=False)
        with patch.object(costing, "resolve_hardware", lambda *a: Recorder()):
            costing.run_hardware(spec, plan_model(spec))
        assert seen[-1][0] == first, (norm, seen[-1])


def test_a_set_profile_stream_serves_every_m_of_a_sweep_and_none_follows_the_runs_m():
    seen: list[int] = []

    class Recorder:
        name = "recorder"

        def cost_model(self, workload, sizes, M):
            seen.append(M)

    for extra, M, want in (([], 4, 4), (["sim.profile_stream=1"], 4, 1), ([], 2, 2)):
        args = [*MLP, "hardware=measured", f"pipeline.M={M}", *extra]
        spec = compose(args, cuda_available=False)
        with patch.object(costing, "resolve_hardware", lambda *a: Recorder()):
            costing.run_hardware(spec, plan_model(spec))
        assert seen[-1] == want, (extra, M, seen)


def test_backend_auto_picks_the_simulator_here_and_the_engine_with_a_device_per_rank(monkeypatch):
    assert (
        compose([*MLP, "backend=auto", "pipeline.K=2"]).backend == "sim"
    )  # a CPU host always simulates
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert compose([*MLP, "backend=auto", "pipeline.K=2"]).backend == "engine"
    assert compose([*MLP, "backend=auto", "pipeline.K=2", "device=cpu"]).backend == "sim"
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert compose([*MLP, "backend=auto", "pipeline.K=2"]).backend == "sim"


def test_engine_with_more_stages_than_gpus_says_to_simulate(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(UserError) as err:
        compose([*MLP, "pipeline.K=2", "device=cuda"])
    msg = str(err.value)
    assert (
        "2 ranks, 2 of them on this host, but it has 1 CUDA device" in msg
        and "backend=sim" in msg
        and "\n" not in msg
    )


def test_an_unknown_hardware_profile_is_one_line_before_anything_runs():
    err = preflight(["backend=sim", "hardware=foo"])
    assert err is not None and "\n" not in err
    assert err.startswith("hardware=foo is not a hardware config; allowed: ") and "tpu_v3" in err


def test_a_profile_too_small_for_one_layer_names_the_layer(tmp_path):
    m = run(compose([*SIM, "hardware.memory_bytes=100000"], cuda_available=False), tmp_path)
    assert m is not None and m.status == "failed"
    assert "layer " in m.error and "alone needs" in m.error and "hardware=tpu_v3" in m.error
    assert "(Sequential)" in m.error or "(Linear)" in m.error


def test_batch_mode_fit_takes_the_largest_batch_that_fits(tmp_path):
    base = [
        "backend=sim",
        "hardware=tpu_v3",
        "logger=none",
        "train.steps=2",
        "model=tuplenet",
        "data=synthetic",
        "data.image_size=32",
        "hardware.memory_bytes=100000000",
        "pipeline.K=2",
        "pipeline.M=4",
        "train.batch_size=16",
        "pipeline.checkpoint=never",
    ]
    m = run(compose([*base, "train.batch_mode=fit"], cuda_available=False), tmp_path / "fit")
    assert m is not None and m.status == "ok", m and m.error
    assert m.batch_mode == "fit" and m.batch_size % 4 == 0 and m.batch_size != 16
    assert max(s.peak_memory_bytes for s in m.stages) <= 100_000_000 and m.hardware["fits_memory"]
    # one more sample per micro-batch would not fit
    bigger = run(
        compose([*base, f"train.batch_size={m.batch_size + 4}"], cuda_available=False),
        tmp_path / "big",
    )
    assert bigger is not None and bigger.status == "ok" and bigger.hardware["fits_memory"] is False


def test_the_batch_fit_picks_under_remat_and_many_micro_batches_is_never_refused(tmp_path):
    # remat, M = 32: a stage keeps its own input per micro-batch in flight, not every layer's; the
    # single-layer check counts each layer with one micro-batch in flight (the least any partition
    # and M need of it), so it never refuses what the fit planned as fitting
    base = [
        "backend=sim", "hardware=tpu_v3", "logger=none", "train.steps=2", "model=tuplenet",
        "data=synthetic", "data.image_size=32", "hardware.memory_bytes=100000000",
        "pipeline.K=2", "pipeline.M=32", "train.batch_size=64", "pipeline.checkpoint=always",
    ]  # fmt: skip
    m = run(compose([*base, "train.batch_mode=fit"], cuda_available=False), tmp_path / "fit")
    assert m is not None and m.status == "ok", m and m.error
    assert m.batch_size > 64 and m.hardware["fits_memory"]
    assert max(s.peak_memory_bytes for s in m.stages) <= 100_000_000


def test_batch_mode_fit_says_when_not_one_sample_fits(tmp_path):
    m = run(
        compose(
            [
                "backend=sim",
                "hardware=tpu_v3",
                "logger=none",
                "model=tuplenet",
                "data=synthetic",
                "hardware.memory_bytes=1000000",
                "pipeline.K=2",
                "pipeline.M=4",
                "train.batch_size=16",
                "train.batch_mode=fit",
                "pipeline.checkpoint=never",
            ],
            cuda_available=False,
        ),
        tmp_path,
    )
    assert m is not None and m.status == "failed" and "\n" not in m.error
    assert m.error.startswith(
        "train.batch_mode=fit: no batch fits hardware=tpu_v3 (1.0 MiB per device)"
    )
    assert "stage 0 needs" in m.error and "per sample" in m.error


def test_an_engine_run_with_batch_mode_fit_runs_the_fitted_batch(tmp_path, monkeypatch):
    import gpipe_repro.runner.planning as planning
    from gpipe_repro.config.device import DeviceMemory

    small = DeviceMemory("a small device", 24 * 2**20, 24 * 2**20, 0, shared=True)
    monkeypatch.setattr(planning, "engine_memory", lambda spec, ranks=None: small)  # not the host's
    spec = compose(
        [
            *MLP,
            "train.batch_mode=fit",
            "train.steps=2",
            "train.warmup_steps=1",
            "train.eval=false",
            "train.progress=false",
        ],
        cuda_available=False,
    )
    from gpipe_repro.runplan.plan import plan_model, plan_run

    planned = plan_run(spec, plan_model(spec), small)
    from gpipe_repro import runner

    m = runner.run(spec, tmp_path)
    assert m.status == "ok" and m.batch_size == planned.spec.train.batch_size != 64
    assert m.plan.micro_batch * spec.pipeline.M == m.batch_size


def test_an_engine_run_can_resolve_batch_mode_fit_before_it_starts():
    from gpipe_repro.config.device import DeviceMemory
    from gpipe_repro.runplan.plan import plan_model, plan_run

    def fit(spec, budget):
        memory = DeviceMemory("a test device", budget, budget, 0)
        return plan_run(spec, plan_model(spec), memory).spec

    spec = compose(
        [
            "model=tuplenet",
            "data=synthetic",
            "pipeline.K=2",
            "pipeline.M=4",
            "train.batch_size=16",
            "pipeline.checkpoint=never",
            "backend=sim",
            "train.batch_mode=fit",
        ],
        cuda_available=False,
    )
    fitted = fit(spec, 100_000_000)
    assert fitted.train.batch_size % 4 == 0 and fitted.train.batch_size > 16
    assert fit(fitted, 10**12).train.batch_size > fitted.train.batch_size
    fixed = compose(["model=tuplenet", "data=synthetic"], cuda_available=False)
    assert fit(fixed, 10**12).train.batch_size == fixed.train.batch_size


def test_a_simulated_run_records_its_threads_per_rank_and_its_sweep_provenance_shows_them(tmp_path):
    """Tables 2 and 3 said "threads per rank ?": a simulated job recorded none (the profile is
    measured with ``train.threads`` intra-op threads)."""
    before = torch.get_num_threads()
    try:
        m = run(compose([*SIM, "train.threads=2"], cuda_available=False), tmp_path / "0_K1")
    finally:
        torch.set_num_threads(before)
    assert m is not None and m.status == "ok", m and m.error
    assert m.env.threads_per_rank == 2
    _, prov = sweep_rows(tmp_path)
    assert prov.threads == (2,) and "threads per rank 2;" in "\n".join(prov.page("t"))


@pytest.mark.parametrize("auto", [[], ["plan=auto", "plan.devices=2", "plan.memory_gib=0.007"]])
def test_a_simulated_run_resolves_its_hardware_profile_once_and_its_plan_carries_it(tmp_path, auto):
    """Decisions are made once: the profile the plan (and plan=auto's search) costs with is the one
    the step is simulated on, resolved once per run (it was resolved two or three times)."""
    resolved, real = [], costing.resolve_hardware

    def resolve(*args):
        resolved.append(real(*args))
        return resolved[-1]

    args = [a for a in SIM if not a.startswith("pipeline.")] + (auto or ["pipeline.K=2"])
    spec = compose(args, cuda_available=False)
    with patch.object(costing, "resolve_hardware", resolve):
        m = run(spec, tmp_path)
        planned = plan(spec, plan_model(spec))
    assert m is not None and m.status == "ok", m.error
    assert len(resolved) == 2  # once for the run, once for the plan made here
    assert planned.hardware is resolved[-1] and planned.costs is not None
    assert m.hardware is not None and m.hardware["name"] == "tpu_v3"
