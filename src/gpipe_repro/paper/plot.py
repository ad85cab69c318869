"""One way to make every artefact's figure: matplotlib without a display, saved at one resolution."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def figure(path: Path, *grid: int, **kw: Any) -> Iterator[tuple[Any, Any]]:
    """``plt.subplots(*grid, **kw)``; on leaving, laid out, written to ``path`` and closed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(*grid, **kw)
    yield fig, axes
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
