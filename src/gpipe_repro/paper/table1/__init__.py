"""Table 1 (GPipe §3): the largest model that fits, per number of accelerators."""
