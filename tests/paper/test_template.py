"""Sentences worded in templates (``paper.template.words``): a macro called with its numbers."""

from gpipe_repro.paper.template import words


def test_a_macro_is_called_with_its_numbers_and_leaves_no_line_of_its_own():
    assert words("claims_throughput", "km", cell=(2, 32)) == "K = 2, M = 32"
    assert words("stats", "trend", metric="BLEU", shape="one", higher=True, steps=[]) == (
        "BLEU: one setting only; no trend to judge."
    )
    assert words("sweep_lines", "checks", series=[]) == ""  # no series: no line
    assert words("hw_lines", "idle", s=type("S", (), {"device": "tpu"})()).startswith("tpu: its")
