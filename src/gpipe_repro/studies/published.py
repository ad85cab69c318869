"""The paper's numbers, each one a ``Quote``: which table, which row and column, the value as printed.

Transcribed from GPipe (Huang et al., 2019): Table 1 (§3: the largest model per number of
accelerators), Tables 2 and 3 (§3: normalised throughput per K and M), Table 4 (§4: transfer
learning) and Table 5 (§5: batch size against BLEU and NLL). Every artefact reads them from here and
puts ours beside them; none keeps a copy.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Quote:
    """One number printed in the paper: ``table`` (1-5), the paper's row and column labels, the value
    and, where the paper adds one, a remark printed beside it."""

    table: int
    row: str
    column: str
    value: float
    note: str = ""

    def text(self) -> str:
        return f"{self.value:g}" + (f" ({self.note})" if self.note else "")


# Table 1's memory columns in bytes, each half in the unit in which its parameter memory is 12 bytes
# per parameter (tests/paper/test_numbers.py): AmoebaNet's "GB" are 10^9 bytes, the Transformer's "G"
# GiB, 2^30 bytes. Parameter memory: weights, gradients and optimiser state; activation memory: the
# peak, over accelerators.
UNITS = {"amoebanet_d": 1e9, "transformer_lm": 2.0**30}


def _table1(
    model: str, column: str, params: float, param_mem: float, act_mem: float
) -> list[Quote]:
    row, unit = f"{model} {column}", UNITS[model]
    return [
        Quote(1, row, "parameters", params),
        Quote(1, row, "parameter memory", param_mem * unit),
        Quote(1, row, "activation memory", act_mem * unit),
    ]


def _throughput(table: int, model: str, cells: dict[tuple[int, int], float]) -> list[Quote]:
    return [Quote(table, model, f"K={K}, M={M}", v) for (K, M), v in cells.items()]


def _table4(
    dataset: str, train: int, test: int, classes: int, acc: float, best: float, note: str = ""
):
    return [
        Quote(4, dataset, "train", train),
        Quote(4, dataset, "test", test),
        Quote(4, dataset, "classes", classes),
        Quote(4, dataset, "accuracy", acc),  # %, AmoebaNet-B(18, 512), mean of 5 fine-tunings
        Quote(4, dataset, "previous best", best, note),
    ]


QUOTES: tuple[Quote, ...] = (
    # Table 1: AmoebaNet-D on TPUv2 (8 GB), Transformer-L on TPUv3 (16 GB); memory in UNITS.
    *_table1("amoebanet_d", "Naive-1", 82e6, 1.05, 6.26),
    *_table1("amoebanet_d", "Pipeline-1", 318e6, 3.8, 3.46),
    *_table1("amoebanet_d", "Pipeline-2", 542e6, 6.45, 8.11),
    *_table1("amoebanet_d", "Pipeline-4", 1.05e9, 12.53, 15.21),
    *_table1("amoebanet_d", "Pipeline-8", 1.8e9, 24.62, 26.24),
    *_table1("transformer_lm", "Naive-1", 282.2e6, 11.7, 3.15),
    *_table1("transformer_lm", "Pipeline-1", 785.8e6, 8.8, 6.4),
    *_table1("transformer_lm", "Pipeline-8", 5.3e9, 59.5, 50.9),
    *_table1("transformer_lm", "Pipeline-32", 21.0e9, 235.1, 199.9),
    *_table1("transformer_lm", "Pipeline-128", 83.9e9, 937.9, 796.1),
    # §3's headline ratios, as printed: the largest model of a column over Naive-1's.
    Quote(1, "ratio", "amoebanet_d Pipeline-1", 3.9, "remat alone"),
    Quote(1, "ratio", "amoebanet_d Pipeline-8", 25, "8 accelerators"),
    Quote(1, "ratio", "transformer_lm Pipeline-128", 298, "128 partitions"),
    # Table 2 (TPU v3) and Table 3 (P100s over PCIe, M = 32): normalised training throughput.
    *_throughput(2, "amoebanet_d", {(2, 1): 1.0, (4, 1): 1.13, (8, 1): 1.38, (2, 4): 1.07}),
    *_throughput(2, "amoebanet_d", {(4, 4): 1.26, (8, 4): 1.72, (2, 32): 1.21, (4, 32): 1.84}),
    *_throughput(2, "amoebanet_d", {(8, 32): 3.48}),
    *_throughput(2, "transformer_lm", {(2, 1): 1.0, (4, 1): 1.07, (8, 1): 1.3, (2, 4): 1.7}),
    *_throughput(2, "transformer_lm", {(4, 4): 3.2, (8, 4): 4.8, (2, 32): 1.8, (4, 32): 3.4}),
    *_throughput(2, "transformer_lm", {(8, 32): 6.3}),
    *_throughput(3, "amoebanet_d", {(2, 32): 1.0, (4, 32): 1.7, (8, 32): 2.7}),
    *_throughput(3, "transformer_lm", {(2, 32): 1.0, (4, 32): 1.8, (8, 32): 3.3}),
    # Table 4: AmoebaNet-B(18, 512) pre-trained on ImageNet, fine-tuned at 480x480.
    *_table4("ImageNet-2012", 1_281_167, 50_000, 1000, 84.4, 83.9, "85.4 with Instagram data"),
    *_table4("CIFAR-10", 50_000, 10_000, 10, 99.0, 98.5),
    *_table4("CIFAR-100", 50_000, 10_000, 100, 91.3, 89.3),
    *_table4("Stanford Cars", 8_144, 8_041, 196, 94.6, 94.8),
    *_table4("Oxford Pets", 3_680, 3_369, 37, 95.9, 93.8),
    *_table4("Food-101", 75_750, 25_250, 101, 93.0, 90.4),
    *_table4("FGVC Aircraft", 6_667, 3_333, 100, 92.7, 92.9),
    *_table4("Birdsnap", 47_386, 2_443, 500, 83.6, 80.2),
    # Table 5: German->English, Transformer-Big T(6, 8192, 16), batch in tokens.
    *(Quote(5, b, "BLEU", v) for b, v in (("260K", 30.92), ("1M", 31.86), ("4M", 32.71))),
    *(Quote(5, b, "NLL", v) for b, v in (("260K", 2.58), ("1M", 2.51), ("4M", 2.46))),
)


def quote(table: int, row: str, column: str) -> Quote:
    """The number the paper prints in ``table`` at ``row`` and ``column`` (KeyError: none)."""
    for q in QUOTES:
        if (q.table, q.row, q.column) == (table, row, column):
            return q
    raise KeyError(f"GPipe Table {table} prints no {column!r} for {row!r}")


def rows(table: int) -> list[str]:
    """The paper's row labels of ``table``, in its order."""
    return list(dict.fromkeys(q.row for q in QUOTES if q.table == table))


def throughput(table: int, model: str) -> dict[tuple[int, int], float]:
    """Table 2 or 3: the paper's normalised throughput of ``model`` per (K, M)."""
    out = {}
    for q in QUOTES:
        if q.table == table and q.row == model:
            k, m = (int(part.split("=")[1]) for part in q.column.split(", "))
            out[(k, m)] = q.value
    return out
