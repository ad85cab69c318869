"""make schedules' page builder on a tiny input: a two-layer MLP on the published profile, every
schedule at K = 2, M = 2, 4 (simulated), and the page's answer and cap verdicts from those rows."""

import argparse
import json

import pytest

from gpipe_repro.paper.schedules import Schedules
from gpipe_repro.paper.schedules_page import bubble_time, summary
from gpipe_repro.studies.schedules import PAPER, SCHEDULES, Settings

TINY = Settings(
    models=(("MLP", ("model=mlp", "data=synthetic", "train.batch_size=16")),),
    hardware=("tpu_v3",),
    Ks=(2,),
    Ms=(2, 4),
    timeline=(2, 4),
    demo=(),
)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("schedules")
    art = Schedules(TINY)
    report = art.collect(None, argparse.Namespace(no_cpu=False), out)
    art.render(report, out)
    return report.rows, out


def test_every_schedule_is_simulated_at_each_cell_with_its_memory(built):
    rows, out = built
    assert {(r.variant, r.K, r.M) for r in rows} == {
        (v[0], 2, M) for v in SCHEDULES for M in (2, 4)
    }
    ok = [r for r in rows if r.status == "ok"]
    # the MLP has too few layers for K = 2 x v = 4 cells: that cell says so instead
    assert {r.variant for r in rows if r.status != "ok"} <= {"interleaved v=4"}
    assert all(r.step_s > 0 and r.peak_bytes > 0 and r.source == "simulated" for r in ok)
    ref = next(r for r in ok if r.variant == PAPER and r.M == 2)
    assert ref.normalized == pytest.approx(1.0)
    by = {(r.variant, r.M): r for r in ok}
    # the bubble: zb-h1 and interleaved below gpipe's at the same M; 1f1b holds less than gpipe
    g = by[("gpipe, remat never", 4)]
    assert bubble_time(by[("zb-h1", 4)]) < bubble_time(g)
    assert by[("1f1b", 4)].peak_bytes <= g.peak_bytes
    lines = json.loads((out / "timelines.json").read_text())
    assert len(lines) == len(ok) // 2  # one timeline per schedule that ran at (K, M) = (2, 4)


def test_the_page_opens_with_its_answer_from_the_rows(built):
    rows, out = built
    page = (out / "schedules.md").read_text()
    s = summary(rows)
    a = s["answer"][0]  # the first model's numbers, worded by templates/schedules.md.j2
    assert (a["model"], a["K"], a["M"], a["hardware"]) == ("MLP", 2, 4, "tpu_v3") and a["parts"]
    head = ("#", "Generated", "**Not a publishable")  # title, provenance, a dirty tree's banner
    first = next(p for p in page.split("\n\n") if not p.startswith(head))
    assert first.startswith("**MLP, K = 2, M = 4 on tpu_v3**: zb-h1 recovers")  # before all else
    assert (out / "schedules.png").stat().st_size > 0
    assert "Under a memory cap" in page and "n/a" in page


def test_the_cap_verdict_names_the_paper_choice_only_where_it_is_fastest(built):
    _, out = built
    section = (out / "schedules.md").read_text().split("## Under a memory cap")[1].split("##")[0]
    rows = [r for r in section.splitlines() if r.startswith("| ") and not r.startswith("| model ")]
    assert rows
    for line in ([c.strip() for c in r.strip("|").split("|")] for r in rows):
        if line[4] == "nothing fits":
            continue
        fastest_is_paper = line[4].startswith(PAPER)
        assert (line[-1] == "**yes**") == (fastest_is_paper and int(line[4].split("M = ")[1]) >= 8)


def test_make_schedules_runs_again_over_its_own_measured_runs(tmp_path, monkeypatch):
    """The measured demo cells run in the report's own folder (``out/runs``); making the report
    again replaces them instead of stopping at the first folder that holds a run's results."""
    import gpipe_repro.runner as runner

    asked = []

    def fake_run(spec, folder):
        asked.append((spec.train.overwrite, folder))

    monkeypatch.setattr(runner, "run", fake_run)
    s = Settings(demo=("experiment=demo", "train.steps=4", "train.warmup_steps=1"), demo_Ms=(4,))
    from gpipe_repro.studies.schedules import measured

    rows = measured(s, tmp_path)
    assert len(asked) == len(SCHEDULES) == len(rows)
    assert all(overwrite for overwrite, _ in asked)
    assert all(folder.parent == tmp_path / "runs" for _, folder in asked)
    assert all(r.status == "the run failed" for r in rows)
