"""gpipe-repro: the GPipe paper (Huang et al., 2019) reproduced with its own pipeline engine."""

__version__ = "0.1.0"
