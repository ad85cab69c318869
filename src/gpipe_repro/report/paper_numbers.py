"""The paper's Tables 2 and 3 as data, and how our experiments map onto them (GPipe §5-6).

Normalised training throughput per (K, M), transcribed from the paper (``shared/paper/GPIPE.md``
§5-6); ``report.paper_tables`` puts ours beside them.
"""

from __future__ import annotations

__all__ = ["PAPER", "TITLES", "NAMES", "EXPERIMENTS", "REFERENCE"]

# GPipe Table 2 (TPU v3) and Table 3 (P100s over PCIe, M = 32): normalised throughput per (K, M).
PAPER: dict[int, dict[str, dict[tuple[int, int], float]]] = {
    2: {
        "amoebanet_d": {
            (2, 1): 1.0,
            (4, 1): 1.13,
            (8, 1): 1.38,
            (2, 4): 1.07,
            (4, 4): 1.26,
            (8, 4): 1.72,
            (2, 32): 1.21,
            (4, 32): 1.84,
            (8, 32): 3.48,
        },
        "transformer_lm": {
            (2, 1): 1.0,
            (4, 1): 1.07,
            (8, 1): 1.3,
            (2, 4): 1.7,
            (4, 4): 3.2,
            (8, 4): 4.8,
            (2, 32): 1.8,
            (4, 32): 3.4,
            (8, 32): 6.3,
        },
    },
    3: {
        "amoebanet_d": {(2, 32): 1.0, (4, 32): 1.7, (8, 32): 2.7},
        "transformer_lm": {(2, 32): 1.0, (4, 32): 1.8, (8, 32): 3.3},
    },
}
TITLES = {
    2: "Table 2 — normalised training throughput on TPUs (GPipe §5)",
    3: "Table 3 — normalised throughput on GPUs without NVLink, M = 32 (GPipe §6)",
}
NAMES = {
    2: {"amoebanet_d": "AmoebaNet-D(18, 256)", "transformer_lm": "Transformer-48"},
    3: {"amoebanet_d": "AmoebaNet-D(18, 128)", "transformer_lm": "Transformer-24"},
}
EXPERIMENTS = {t: [f"table{t}_amoebanet", f"table{t}_transformer"] for t in (2, 3)}
REFERENCE = {2: (2, 1), 3: (2, 32)}
