"""The scorecard (``reports/README.md``) and the pages' answers: one source, from the reports alone."""

import re
import shutil
from pathlib import Path

import pytest

from gpipe_repro.paper import scorecard
from gpipe_repro.paper.claims import _claim, anchor, of, registry
from gpipe_repro.paper.claims.throughput import cells_within
from gpipe_repro.paper.verdict import RULES, UNTESTABLE, VERDICTS

REPORTS = Path(__file__).resolve().parents[2] / "reports"


def test_the_committed_scorecard_is_what_the_committed_reports_give():
    """``make scorecard`` was run after the last report changed (else: run it)."""
    assert (REPORTS / "README.md").read_text() == scorecard.render(REPORTS)


def test_the_scorecard_renders_the_same_from_a_copy_of_the_reports(tmp_path):
    """Nothing but the reports' own files decides it: no clock, host, git or working folder."""
    copy = tmp_path / "elsewhere" / "reports"
    shutil.copytree(REPORTS, copy)
    assert scorecard.main(["--reports", str(copy)]) == 0
    assert (copy / "README.md").read_text() == (REPORTS / "README.md").read_text()
    assert scorecard.main(["--reports", str(copy), "--check"]) == 0
    (copy / "README.md").write_text("stale\n")
    assert scorecard.main(["--reports", str(copy), "--check"]) == 1


def test_every_claim_has_one_of_the_four_verdicts_and_a_row():
    page = (REPORTS / "README.md").read_text()
    claims = registry()
    assert len({c.key for c in claims}) == len(claims) > 20
    rows = [line for line in page.splitlines() if re.match(r"\| \d+ \|", line)]
    assert len(rows) == len(claims)
    for row in rows:
        verdict = re.search(r"\| \*\*(.+?)\*\* \|", row)
        assert verdict and verdict.group(1) in VERDICTS, row
    counts = re.search(r"\*\*(\d+) claims:\*\* (.+)\.", page)
    assert counts and int(counts.group(1)) == len(claims)
    # every section of the paper the issue names has a claim
    sections = " ".join(c.section for c in claims)
    for part in ("§2.2", "§2.3", "Table 1", "Table 2", "Table 3", "Table 4", "Table 5", "Fig. 3"):
        assert part in sections, part


def _entry(**change):
    c = registry()[0]
    entry = {f: getattr(c, f) for f in ("key", "section", "statement", "paper", "report", "page",
                                         "heading", "rows", "rule", "judge")}  # fmt: skip
    return {**entry, **change}


def test_a_claim_of_claims_yaml_is_refused_in_one_line_naming_its_field():
    """A typo in the data file stops the registry with the claim and the field, not a traceback
    from a judge met later."""
    assert _claim(_entry()).find(REPORTS / registry()[0].report) == registry()[0].find(
        REPORTS / registry()[0].report
    )
    for change, words in (
        ({"rule": "roughly"}, "rule 'roughly' is none of"),
        ({"judge": "algorithm.no_such"}, "judge 'algorithm.no_such' is no function of"),
        ({"judge": "os.getcwd"}, "judge 'os.getcwd' is no function of"),
        ({"verdict": "reproduced"}, "field 'verdict' is unknown; allowed:"),
    ):
        with pytest.raises(ValueError, match=re.escape(words)):
            _claim(_entry(**change))
    entry = _entry()
    del entry["heading"]
    with pytest.raises(ValueError, match="field 'heading' is missing"):
        _claim(entry)


def test_a_judges_arguments_come_from_the_data():
    """``args`` reach the judge after the folder: Table 2's and 3's cell claims share a judge."""
    t2, t3 = (next(c for c in registry() if c.key == k) for k in ("t2-cells", "t3-cells"))
    assert t2.judge == t3.judge and (t2.args, t3.args) == ((2,), (3,))
    assert t3.find(REPORTS / "table3") == cells_within(REPORTS / "table3", 3)
    assert t3.find(REPORTS / "table3").verdict != UNTESTABLE


@pytest.mark.parametrize("claim", registry(), ids=lambda c: c.key)
def test_each_claim_links_to_a_section_its_page_has(claim):
    page = REPORTS / claim.report / claim.page
    headings = [anchor(h.lstrip("#")) for h in page.read_text().splitlines() if re.match(r"#+ ", h)]
    assert anchor(claim.heading) in headings, (claim.key, claim.heading)


@pytest.mark.parametrize("report", sorted({c.report for c in registry()}))
def test_a_page_opens_with_the_verdicts_the_scorecard_gives(report):
    """The first lines after the title are its claims' verdicts, the same findings as the
    scorecard's (one source: ``claims.answers``)."""
    claims = of(report)
    page = next(REPORTS / report / c.page for c in claims)
    lines = page.read_text().splitlines()
    assert lines[0].startswith("# ")
    first = [x for x in lines[2 : 4 + len(claims)] if x.startswith("- **")]
    assert len(first) == len(claims)
    card = (REPORTS / "README.md").read_text()
    for line, c in zip(first, claims):
        f = c.find(REPORTS / report)
        assert line.startswith(f"- **{f.verdict}** — {c.statement}"), line
        assert f.ours in line and f"**{f.verdict}**" in card


def test_every_rule_is_worded_on_the_scorecard_in_its_order():
    """``verdict.RULES`` names the rules a claim may use; the scorecard's template words each."""
    rules = scorecard.render(REPORTS).split("## The rules")[1].split("\n\n")[1]
    assert re.findall(r"^- \*\*(.+?)\*\*: ", rules, re.M) == list(RULES)
