"""Sentences worded in templates (``paper.template.words``): a macro called with its numbers."""

from gpipe_repro.paper.template import words


def test_a_macro_is_called_with_its_numbers_and_leaves_no_line_of_its_own():
    assert words("claims_throughput", "km", cell=(2, 32)) == "K = 2, M = 32"
    assert words("stats", "trend", metric="BLEU", shape="one", higher=True, steps=[]) == (
        "BLEU: one setting only; no trend to judge."
    )
    assert words("sweep_lines", "checks", series=[]) == ""  # no series: no line
    assert words("hw_lines", "idle", s=type("S", (), {"device": "tpu"})()).startswith("tpu: its")


def test_a_series_source_is_worded_by_its_key():
    """``claims_throughput``'s ``where``: measured on K GPUs, else the profile simulated on."""
    from gpipe_repro.paper.claims.throughput import NAMES

    def where(source: str, hardware: str) -> str:
        return words("claims_throughput", "where", key=("m", source, hardware, "fit"), names=NAMES)

    assert where("measured", "h100") == "measured on K GPUs (h100)"
    assert where("simulated", "p100_pcie") == "simulated on a P100 (PCIe) profile"
    assert where("simulated", "tpu_v9") == "simulated on tpu_v9"  # no name: the hardware's key
