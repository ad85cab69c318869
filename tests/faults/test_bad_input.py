"""Every mistake in one line, from every entry point (issue #11).

The table holds the bad inputs users have hit. Each goes through the same checks as ``gpipe-run`` and
``gpipe-torchrun`` (``config.compose.preflight`` for the command line, then validation and the
meta-device plan for values) in this process — fast — and a sample of each kind goes through the real
entry points as subprocesses, for the exit code, the one line and the failed ``metrics.json``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _shared import ENV

from gpipe_repro.config.compose import compose, preflight
from gpipe_repro.errors import UserError
from gpipe_repro.runplan.plan import plan_model

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["model.hidden=32", "model.depth=3", "train.steps=2", "logger=none"]

# (overrides, exit code, a fragment of the one line)
COMMAND_LINE = [
    (["model=foo"], "model=foo is not a model config; allowed: amoebanet_b"),
    (["data=imagenet"], "data=imagenet is not a data config"),
    (["optim=lamb"], "optim=lamb is not a optim config"),
    (
        ["pipeline=zb"],
        "pipeline=zb is not a pipeline config; allowed: 1f1b, gpipe, interleaved, zb-h1",
    ),
    (["logger=tensorboard"], "logger=tensorboard is not a logger config"),
    (["hardware=tpu_v9"], "hardware=tpu_v9 is not a hardware config"),
    (["pipeline.Q=1"], "pipeline.Q is not a config key"),
    (["pipelin.K=2"], "pipelin.K is not a config key; did you mean pipeline.K?"),
    (["+pipelin.K=2"], "pipelin.K is not a config key; did you mean pipeline.K?"),
    (["+pipeline.k=2"], "pipeline.k is not a config key; did you mean pipeline.K?"),
    (["pipeline.K=abc"], "pipeline.K='abc' is not an integer; allowed: an integer >= 1"),
    (["pipeline.M=1.5"], "pipeline.M='1.5' is not an integer"),
    (["train.steps=ten"], "train.steps='ten' is not an integer"),
    (["train.eval=maybe"], "train.eval='maybe' is not a boolean"),
    (["seed=abc"], "seed='abc' is not an integer"),
    (["optim=adam", "optim.betas=abc"], "optim.betas='abc' is not a list"),
    (["optim.betas=[0.9,0.99]"], "optim.betas is not a key of optim=rmsprop; optim=adam has it"),
    (["model=tuplenet", "model.hidden=3"], "model.hidden is not a key of model=tuplenet"),
    (["data.foo=1"], "data.foo is not a key of data=mnist; its keys: eval_size, normalize"),
    (["hydra/launcher=nonexistent"], "hydra/launcher=nonexistent is not a hydra/launcher config"),
    (["-m", "pipeline.K=1,abc"], "pipeline.K='abc' is not an integer"),
    (["pipeline.K=[1"], ""),
    (["hydra.run.dir=/etc/hostname/run"], "is a file, not a folder"),
    (["pipeline.K=4", "plan=auto"], "pipeline.K=4 conflicts with plan=auto, which chooses it"),
    (["plan=auto", "pipeline=1f1b"], "pipeline=1f1b conflicts with plan=auto, which chooses it"),
    (["plan=sometimes"], "plan=sometimes is not a plan config; allowed: auto, manual"),
    # output paths (issue #36 finding 3): the key, the value and what to do
    (["hydra.run.dir="], "hydra.run.dir is empty: the run would write into the current folder"),
    (["-m", "hydra.sweep.dir="], "hydra.sweep.dir is empty: the run would write into the current"),
    (
        ["train.save_dir="],
        "train.save_dir is empty: the run would write into the current folder; give a folder",
    ),
    (
        ["hydra.run.dir=/tmp/é"],
        "hydra.run.dir=/tmp/é: Hydra cannot read 'é' in a value unless it is quoted; quote the "
        "value: 'hydra.run.dir=\"/tmp/é\"'",
    ),
    (["hydra.run.dir=/tmp/a(1)"], "Hydra cannot read '(' in a value unless it is quoted"),
    (
        ["hydra.run.dir=/tmp/my", "run"],
        "'run' is not an override (key=value); if it is the rest of hydra.run.dir=/tmp/my (a "
        "value with a space), quote the whole: 'hydra.run.dir=/tmp/my run'",
    ),
    (["hydra.run.dir=/tmp/a,b"], "hydra.run.dir=/tmp/a,b: the comma makes a sweep of folders"),
    (["hydra.run.dir=/etc/hostname"], "/etc/hostname is a file, not a folder; choose a folder"),
    (["pipeline.K=1,2"], "pipeline.K=1,2 is a sweep of 2 values: add -m to run each"),
    # conflicting options (issue #36 finding 7)
    (
        ["pipeline.K=2", "pipeline.balance=[2,3]", "pipeline.balance_by=flops"],
        "pipeline.balance=[2,3] and pipeline.balance_by=flops exclude each other: balance gives "
        "the cells, balance_by chooses them; allowed: one of them",
    ),
]

VALUES = [
    (
        ["pipeline.K=2", "pipeline.checkpoint=[never]"],
        "pipeline.checkpoint=['never'] is not allowed; allowed: never, except_last, always, or a "
        "list of pipeline.K=2 of them",
    ),
    (
        ["pipeline.K=2", "pipeline.checkpoint=[never,sometimes]"],
        "pipeline.checkpoint=['never', 'sometimes'] is not allowed",
    ),
    (["pipeline.K=0"], "pipeline.K=0 is invalid; allowed: an integer >= 1"),
    (["pipeline.M=0"], "pipeline.M=0 is invalid; allowed: an integer >= 1"),
    (
        ["pipeline.M=3"],
        "pipeline.M=3 does not divide train.batch_size=64; allowed: a divisor of 64",
    ),
    (["pipeline.M=128"], "pipeline.M=128 exceeds the mini-batch of 64"),
    (["pipeline.K=9"], "pipeline.K=9 exceeds the model's 5 layers; allowed: 1..5"),
    (
        ["pipeline.K=2", "pipeline.balance=[4,4]"],
        "pipeline.balance=[4, 4] sums to 8 but the model has 5 layers",
    ),
    (["pipeline.K=2", "pipeline.balance=[1,2,3]"], "has 3 cells but pipeline.K=2"),
    (
        ["pipeline.K=2", "pipeline.balance=[0,5]"],
        "pipeline.balance=[0, 5] has a cell with 0 layers",
    ),
    (
        ["pipeline.checkpoint=sometimes"],
        "pipeline.checkpoint='sometimes' is not allowed; allowed: never, except_last",
    ),
    (
        ["pipeline.schedule=zb"],
        "pipeline.schedule='zb' is not allowed; allowed: gpipe, 1f1b, interleaved, zb-h1",
    ),
    # the schedules since GPipe (#39): cells per rank, M, and a cell for every layer count
    (
        ["pipeline.schedule=interleaved"],
        "pipeline.virtual_stages=1 is too few for schedule interleaved; allowed: an integer >= 2",
    ),
    (
        ["pipeline.virtual_stages=2"],
        "pipeline.virtual_stages=2 needs a schedule that holds several chunks per rank; allowed "
        "with schedule gpipe: 1",
    ),
    (
        ["pipeline.virtual_stages=0"],
        "pipeline.virtual_stages=0 is invalid; allowed: an integer >= 1",
    ),
    (
        ["pipeline=interleaved", "pipeline.K=2", "pipeline.M=1"],
        "pipeline.M=1 cannot run schedule interleaved with 2 chunks per rank at K=2; allowed: a "
        "multiple of K=2",
    ),
    (
        ["pipeline=interleaved", "pipeline.K=4", "pipeline.M=4"],
        "pipeline.virtual_stages=2 leaves a cell empty: K=4 x 2 = 8 cells for the model's 5 "
        "layers; allowed: 1..1",
    ),
    (
        [
            "pipeline=zb-h1",
            "pipeline.virtual_stages=2",
            "pipeline.K=2",
            "pipeline.M=2",
            "pipeline.balance=[2,3]",
        ],
        "pipeline.balance=[2, 3] has 2 cells but pipeline.K=2 x pipeline.virtual_stages=2 = 4",
    ),
    (["pipeline.host_memory=swap"], "pipeline.host_memory='swap' is not allowed"),
    (
        ["pipeline.balance_by=luck"],
        "pipeline.balance_by='luck' is not allowed; allowed: params, flops, time, memory",
    ),
    (["pipeline.replicas=0"], "pipeline.replicas=0 is invalid"),
    (["pipeline.replicas=3"], "pipeline.replicas=3 does not divide train.batch_size=64"),
    (["pipeline.timeout_s=0"], "pipeline.timeout_s=0.0 is invalid; allowed: a number >= 1"),
    (["train.steps=0"], "train.steps=0 is invalid; allowed: an integer >= 1"),
    (["train.batch_size=0"], "train.batch_size=0 is invalid"),
    (["train.steps=3", "train.warmup_steps=3"], "train.warmup_steps=3 leaves no timed step"),
    (["train.threads=0"], "train.threads=0 is invalid"),
    (["train.save_keep=0"], "train.save_keep=0 is invalid"),
    (
        ["train.lr_schedule=linear"],
        "train.lr_schedule='linear' is not allowed; allowed: constant, cosine",
    ),
    (
        ["train.resume=a", "train.init_from=b"],
        "train.resume=a and train.init_from=b exclude each other",
    ),
    (["optim.lr=-1"], "optim.lr=-1.0 is invalid; allowed: a number >= 0"),
    (["optim.name=lamb"], "optim.name='lamb' is not allowed; allowed: rmsprop, sgd, adam"),
    (["optim=adam", "optim.betas=[0.9]"], "optim.betas=[0.9] is invalid; allowed: two numbers"),
    (["device=tpu"], "device='tpu' is not allowed; allowed: auto, cpu, cuda"),
    (["data.eval_size=-1"], "data.eval_size=-1 is invalid; allowed: an integer in 1..4999"),
    (["data.eval_size=0"], "data.eval_size=0 is invalid"),
    (
        ["data=synthetic", "data.kind=tokens", "model=tokennet", "data.vocab=0"],
        "data.vocab=0 is invalid",
    ),
    (
        ["data=synthetic", "data.kind=tokens", "model=tokennet", "data.seq_len=0"],
        "data.seq_len=0 is invalid",
    ),
    (
        ["data=synthetic", "data.kind=video"],
        "data.kind='video' is not allowed; allowed: image, tokens, pairs",
    ),
    (["model.hidden=-5"], "model.hidden=-5 is invalid; allowed: an integer >= 1"),
    (["model.depth=0"], "model.depth=0 is invalid; allowed: an integer >= 1"),
    (["model.dropout=2"], "model.dropout=2.0 is invalid; allowed: a number in 0..1"),
    (["model=amoebanet_d", "model.L=4"], "model.L=4 is invalid; allowed: a positive multiple of 3"),
    (
        ["model=transformer_lm"],
        "model=transformer_lm needs tokens data, but the dataset gives image",
    ),
    (
        ["model=transformer_lm", "data=synthetic", "data.kind=tokens", "model.d=130"],
        "model.d=130 is not divisible by model.A=4",
    ),
    (["data=cifar10"], "data.root is not set; cifar10 is read from a local folder"),
    (
        ["data=cifar10", "data.root=/nonexistent"],
        "cifar10 not found; expected /nonexistent/cifar-10-batches-py",
    ),
    (["backend=sim", "hardware=tpu_v3", "hardware.link_hops=0"], "hardware.link_hops=0 is invalid"),
    (["backend=sim", "plan=auto"], "plan=auto with backend=sim needs plan.devices"),
]


def test_balance_by_is_recorded_as_not_used_when_balance_gives_the_cells():
    """Issue #36 finding 7: metrics.json recorded a balance_by that pipeline.balance had overruled
    (a config file's or the default; on the command line the two are refused above)."""
    from gpipe_repro.metrics.summary import base_metrics

    by = ["model.depth=3", "pipeline.K=2", "pipeline.balance_by=flops"]
    given = ["model.depth=3", "pipeline.K=2", "pipeline.balance=[2,3]"]
    assert base_metrics(compose(by, cuda_available=False)).pipeline.balance_by == "flops"
    m = base_metrics(compose(given, cuda_available=False))
    assert m.pipeline.balance == [2, 3] and m.pipeline.balance_by is None


def _check(overrides: list[str]) -> str:
    """What gpipe-run says about well-formed ``overrides`` before any rank starts (its one line)."""
    if not any(o.startswith("model=") for o in overrides):
        overrides = ["model.depth=3", *overrides]  # the default MLP with 5 layers
    # well-formed (one preflight per row: it composes every job): the job runs and fails with its
    # metrics.json
    assert preflight(overrides) is None
    try:
        plan_model(compose([o for o in overrides if o != "-m"], cuda_available=False, check=False))
    except UserError as e:
        return str(e)
    return ""


@pytest.mark.parametrize("group", ["pipeline", "train"])
def test_every_bounded_option_refuses_a_value_past_its_bound_in_one_line(group):
    """Beyond the table: each option of the group that declares a range or choices (the schema's own
    metadata) is refused just past its bound, in one line naming key=value and what is allowed."""
    from dataclasses import fields, replace

    from gpipe_repro.config.validate import validate

    base = compose(["model.depth=3"], cuda_available=False)
    checked = []
    for f in fields(getattr(base, group)):
        meta = f.metadata
        if meta.get("choices"):
            bad: object = "nonesuch"
        elif meta.get("min") is not None:
            bad = meta["min"] - 1
        elif meta.get("max") is not None:
            bad = meta["max"] + 1
        else:
            continue
        cfg = replace(base, **{group: replace(getattr(base, group), **{f.name: bad})})
        with pytest.raises(UserError) as err:
            validate(cfg, cuda_available=False)
        msg = str(err.value)
        assert msg.startswith(f"{group}.{f.name}=") and "; allowed: " in msg, msg
        assert "\n" not in msg
        checked.append(f.name)
    assert len(checked) >= 5, checked  # the metadata is where the bounds are declared


@pytest.mark.parametrize(
    "overrides,message", COMMAND_LINE, ids=[" ".join(c[0]) for c in COMMAND_LINE]
)
def test_command_line_mistakes_are_one_line_before_anything_runs(overrides, message):
    err = preflight(overrides)
    assert err is not None and message in err and "\n" not in err, err


@pytest.mark.parametrize("overrides,message", VALUES, ids=[" ".join(v[0]) for v in VALUES])
def test_bad_values_are_one_line_naming_the_key(overrides, message):
    err = _check(overrides)
    assert message in err and "\n" not in err, err


# gpipe-plan (issue #19): its own mistakes, one line each, exit 2 (run in this process)
PLAN_BASE = ["hardware=tpu_v3", "model.hidden=1024"]
PLAN = [
    ([*PLAN_BASE, "plan.devices=2", "plan.memory_gib=0.001"], "no configuration fits"),
    ([*PLAN_BASE, "plan.devices=7"], "plan.devices=7 exceeds the model's 6 layers; allowed: 1..6"),
    (["hardware=tpu_v9"], "hardware=tpu_v9 is not a hardware config"),
    ([*PLAN_BASE, "plan.batch_size=some"], "plan.batch_size='some' is invalid"),
    ([*PLAN_BASE, "plan.device=2"], "plan.device is not a config key"),
    ([*PLAN_BASE, "plan.devices=0"], "plan.devices=0 is invalid; allowed: an integer >= 1"),
    (["--bogus"], "--bogus is not an option; allowed: -h/--help and key=value overrides"),
]


@pytest.mark.parametrize("args,message", PLAN, ids=[p[1] for p in PLAN])
def test_gpipe_plan_mistakes_are_one_line_and_exit_2(tmp_path, capsys, args, message):
    from gpipe_repro.search.__main__ import main

    assert main([*args, f"plan.out={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    if "fits" in message:  # the smallest need, per stage
        assert "MiB per stage" in err[0] and err[0].count(",") >= 1
    assert not (tmp_path / "plan.csv").exists()


def test_gpipe_plan_help_prints_its_usage(capsys):
    """Issue #36 finding 3: ``gpipe-plan --help`` ended in Hydra's LexerNoViableAltException."""
    from gpipe_repro.search.__main__ import main

    assert main(["--help"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("``gpipe-plan``") and "plan.devices=1" in out and not err


def test_compose_refuses_a_flag_in_one_line():
    with pytest.raises(UserError, match="'--help' is not an override; allowed: key=value"):
        compose(["--help"])


# Output-path problems through gpipe-run itself (issue #36 finding 3): one line naming the key and
# the value, exit 2, nothing written — also what only trying to create the folder tells (/sys).
# ({} is the test's folder)
PATHS = [
    (["hydra.run.dir="], "hydra.run.dir is empty"),
    (["hydra.run.dir=/sys/probe_run"], "hydra.run.dir=/sys/probe_run: "),
    (["hydra.run.dir={}/é"], "Hydra cannot read 'é' in a value unless it is quoted"),
    (["hydra.run.dir={}/my", "run"], "'run' is not an override (key=value)"),
    (["hydra.run.dir={}/file/run"], "is a file, not a folder"),
]


@pytest.mark.slow
@pytest.mark.parametrize("args,message", PATHS, ids=[" ".join(a) for a, _ in PATHS])
def test_output_path_problems_through_gpipe_run_are_one_line_exit_2(tmp_path, args, message):
    (tmp_path / "file").write_text("a file")
    bindir = Path(sys.executable).parent
    args = [a.replace("{}", str(tmp_path)) for a in args]
    r = _entry([str(bindir / "gpipe-run"), *args, *SMALL], tmp_path)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and message in lines[0], r.stderr[-1500:]
    assert "Traceback" not in r.stderr and "HYDRA_FULL_ERROR" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # nothing written
    assert not Path("/sys/probe_run").exists()


@pytest.mark.slow
def test_a_quoted_folder_with_a_space_and_non_ascii_is_where_the_run_writes(tmp_path):
    """What the one line says to do works."""
    bindir = Path(sys.executable).parent
    r = _entry([str(bindir / "gpipe-run"), f'hydra.run.dir="{tmp_path}/mé run"', *SMALL], tmp_path)
    assert r.returncode == 0, r.stderr[-1500:]
    assert json.loads((tmp_path / "mé run" / "metrics.json").read_text())["status"] == "ok"


def _entry(cmd: list[str], tmp: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=ENV, cwd=tmp)


# One of each kind (the tables above hold every message): refused before anything runs (exit 2), and
# a job that runs and fails (exit 1, its metrics.json says why).
SAMPLE = [
    (["pipeline.K=abc"], 2, "pipeline.K='abc' is not an integer"),
    (["pipeline.M=3"], 1, "pipeline.M=3 does not divide train.batch_size=64"),
]


@pytest.mark.slow
@pytest.mark.parametrize("overrides,code,message", SAMPLE, ids=[" ".join(s[0]) for s in SAMPLE])
def test_through_gpipe_run_and_gpipe_torchrun(tmp_path, overrides, code, message):
    bindir = Path(sys.executable).parent
    for name, cmd in [
        ("gpipe-run", [str(bindir / "gpipe-run"), f"hydra.run.dir={tmp_path}/run"]),
        (
            "gpipe-torchrun",
            [
                str(bindir / "gpipe-torchrun"),
                "--nnodes",
                "1",
                "--nproc-per-node",
                "1",
                "--out",
                str(tmp_path / "torchrun"),
            ],
        ),
    ]:
        r = _entry([*cmd, *SMALL, *overrides], tmp_path)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.returncode == code, (name, r.returncode, r.stderr[-1500:])
        assert len(lines) == 1 and message in lines[0] and "Traceback" not in r.stderr, (
            name,
            r.stderr[-1500:],
        )
        folder = tmp_path / ("run" if name == "gpipe-run" else "torchrun")
        if code == 1:  # the job ran: its metrics.json says why it failed
            m = json.loads((folder / "metrics.json").read_text())
            assert m["status"] == "failed" and message in m["error"], name
        else:
            assert not (folder / "metrics.json").exists(), name


# A folder holding a run's results (issue #18): refused in one line before anything runs or is
# written, naming the folder and the ways on. (what the folder holds, the one line)
FOLDERS = [
    (
        "ok",
        "holds a run's results (status ok, 3 steps); continue it with train.resume=auto, run in "
        "a new folder (hydra.run.dir=...), or replace it with train.overwrite=true",
    ),
    ("interrupted", "holds a run's results (status interrupted, 3 steps); continue it with"),
    ("diverged", "holds a run's results (status diverged, 3 steps)"),
    ("failed", "holds a run's results (status failed, 3 steps)"),
    ("saves", "holds an interrupted run's saves; continue it with train.resume=auto"),
]


def _hold(folder: Path, what: str) -> None:
    from gpipe_repro.metrics.contract import RunMetrics
    from gpipe_repro.metrics.writer import write_metrics

    if what == "saves":
        from gpipe_repro.runner import run

        run(
            compose([*SMALL, "train.save_every=1", "train.eval=false"], cuda_available=False),
            folder,
        )
        (folder / "metrics.json").unlink()  # the owner was killed: only the saves are left
        return
    write_metrics(folder, RunMetrics(status=what, losses=[2.5, 2.25, 2.0]))


@pytest.mark.parametrize("what,message", FOLDERS, ids=[f[0] for f in FOLDERS])
def test_a_folder_holding_a_run_is_one_line_and_left_as_it_is(tmp_path, what, message):
    from gpipe_repro.runner import FolderInUse, run

    _hold(tmp_path, what)
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(FolderInUse) as err:
        run(compose([*SMALL, "train.eval=false"], cuda_available=False), tmp_path)
    msg = str(err.value)
    assert message in msg and str(tmp_path) in msg and "\n" not in msg, msg
    assert "train.overwrite=true" in msg and sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_save_folder_holding_another_runs_save_of_that_step_is_one_line(tmp_path):
    from gpipe_repro.runner import run

    args = [*SMALL, "train.eval=false", "train.save_every=2", f"train.save_dir={tmp_path}/s"]
    assert run(compose(args, cuda_available=False), tmp_path / "a").status == "ok"
    m = run(compose(args, cuda_available=False), tmp_path / "b")
    assert m.status == "failed" and "\n" not in m.error
    assert "save-2 is another run's save; give this run a save folder of its own" in m.error


@pytest.mark.slow
def test_a_folder_holding_a_run_through_gpipe_run(tmp_path):
    _hold(tmp_path / "run", "ok")
    before = (tmp_path / "run" / "metrics.json").read_text()
    bindir = Path(sys.executable).parent
    r = _entry([str(bindir / "gpipe-run"), f"hydra.run.dir={tmp_path}/run", *SMALL], tmp_path)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 1 and len(lines) == 1 and "train.resume=auto" in lines[0], r.stderr
    assert (tmp_path / "run" / "metrics.json").read_text() == before
