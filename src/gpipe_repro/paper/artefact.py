"""One shape for every paper artefact: collect -> typed rows -> summary -> markdown + plot; one publish rule.

An ``Artefact`` (one per paper table or figure, ``paper.registry``) says how its runs become typed
rows (``collect``: through the ``metrics.json`` contract, or planned / measured in-process) and how
the rows become a page and a plot (``markdown`` and ``plot``, or a whole ``render``, from the rows
and the provenance alone). ``make`` is
the one flow around them: rows from the runs, or back from the artefact's own CSV (``--from``), then
the CSV (columns from the row type), ``provenance.json`` and the render. An artefact of one sweep is
three functions (``SweepArtefact``); one measured or planned here re-renders from its CSV alone
(``in_process``); a variant made by one on/off option is its ``switch``. ``publish`` is the one rule
for ``reports/<folder>/``: only the canonical command writes there, and only a report of one clean
commit; anything else stays where it was written, and says so.
"""

from __future__ import annotations

import argparse
import shutil
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Generic, TypeVar

from ..errors import UserError
from ..typed_csv import read_csv, write_csv
from .provenance import FILE, Provenance

R = TypeVar("R")
REPORTS = Path("reports")


@dataclass
class Report(Generic[R]):
    """An artefact's typed rows and where their numbers come from."""

    rows: list[R]
    provenance: Provenance


class Artefact(ABC, Generic[R]):
    """A paper artefact. Subclasses set the class attributes and ``collect`` / ``render``."""

    name: str  # the make target and the registry's key
    folder: str  # reports/<folder>/
    row: type  # the CSV's row type: its fields are the columns
    command: str  # the canonical make target's command
    csv = "results.csv"
    siblings: tuple[str, ...] = ()  # files beside the CSV that render reads too
    sweep = False  # its runs are a gpipe-run sweep, given with --from (or by the callback)
    in_process = False  # its rows are measured or planned here: --from takes only its CSV
    page = "results"  # render writes <page>.md and <page>.png
    switch: tuple[str, str] | None = None  # (flag, help): one on/off option, the variant it names

    @property
    def about(self) -> str:
        """One line on what it reproduces (``--help``)."""
        return (type(self).__doc__ or self.name).splitlines()[0]

    def options(self, parser: argparse.ArgumentParser) -> None:
        """Options of this artefact alone (its variants); by default its ``switch``, if any."""
        if self.switch:
            parser.add_argument(f"--{self.switch[0]}", action="store_true", help=self.switch[1])

    def check(self, opts: argparse.Namespace) -> str | None:
        """What is wrong with this artefact's options (one line), or None."""
        return None

    def variant(self, opts: argparse.Namespace) -> str | None:
        """What ``opts`` change from the canonical artefact (a folder name), or None; by default
        the ``switch``'s flag when it is on."""
        on = self.switch and getattr(opts, self.switch[0].replace("-", "_"), False)
        return self.switch[0] if self.switch and on else None

    def work(self, opts: argparse.Namespace) -> Path:
        """Where an invocation without --out writes: outputs/<name>/[<variant>/]."""
        return Path("outputs") / self.name / (self.variant(opts) or "")

    @abstractmethod
    def collect(self, source: Path | None, opts: argparse.Namespace, out: Path) -> Report[R]:
        """The rows from the runs in ``source`` (a sweep or work folder; None: the artefact's own
        runs, written under ``out``)."""

    def render(self, report: Report[R], out: Path) -> list[Path]:
        """The page and the plots, from the rows, the provenance and the files beside the CSV in
        ``out`` alone; returns the files written."""
        md, png = out / f"{self.page}.md", out / f"{self.page}.png"
        md.write_text(self.markdown(report, out))
        self.plot(report, png)
        return [md, png]

    def markdown(self, report: Report[R], out: Path) -> str:
        """The page: its template filled from the summary of ``report`` (and of the files beside
        its CSV in ``out``)."""
        raise NotImplementedError(f"{self.name} renders its own page")

    def plot(self, report: Report[R], path: Path) -> None:
        raise NotImplementedError(f"{self.name} renders its own plots")


class SweepArtefact(Artefact[R]):
    """An artefact of one ``gpipe-run`` sweep made of three functions of its module: the report
    from the sweep's folder, the page from the rows, the provenance and the output folder (where its
    CSV is, which the claims it judges read: ``paper.claims``), the plot from the rows (``page``:
    the files' name, default the artefact's)."""

    sweep = True

    def __init__(
        self,
        name: str,
        row: type,
        about: str,
        collect: Callable[[Path], Report[R]],
        markdown: Callable[[list[R], Provenance, Path], str],
        plot: Callable[[list[R], Path], None],
        page: str | None = None,
    ) -> None:
        self.name = self.folder = name
        self.page = page or name
        self.row, self._about = row, about
        self.command = f"gpipe-run -m experiment={name}"
        self._collect, self._markdown, self._plot = collect, markdown, plot

    @property
    def about(self) -> str:
        return self._about

    def collect(self, source: Path | None, opts: argparse.Namespace, out: Path) -> Report[R]:
        assert source is not None  # make() asks for --from SWEEP first
        return self._collect(source)

    def markdown(self, report: Report[R], out: Path) -> str:
        return self._markdown(report.rows, report.provenance, out)

    def plot(self, report: Report[R], path: Path) -> None:
        self._plot(report.rows, path)


def make(
    art: Artefact[Any], source: Path | None, out: Path, opts: argparse.Namespace, command: str
) -> tuple[Report[Any], list[Path]]:
    """Collect (or read the artefact's CSV back when ``source`` is one), write the CSV, the provenance
    and the render into ``out``; returns the report and every file written."""
    out.mkdir(parents=True, exist_ok=True)
    report: Report[Any]
    if source is not None and source.suffix == ".csv":
        try:
            rows: list[Any] = read_csv(source, art.row)
        except ValueError as err:
            raise UserError(
                f"--from {source}: {err}; allowed: the {art.csv} that {art.name} writes, or its "
                "sweep or work folder"
            ) from None
        report = Report(rows, Provenance.load(source.parent))
        report.provenance = report.provenance.rerendered(source, command)
        for name in art.siblings:
            if (source.parent / name).exists() and source.parent.resolve() != out.resolve():
                shutil.copy2(source.parent / name, out / name)
    elif art.sweep and source is None:
        raise UserError(f"--from SWEEP is needed (a `{art.command}` folder)")
    elif art.in_process and source is not None:
        raise UserError(f"--from takes its {art.csv} (re-render), not a folder")
    else:
        report = art.collect(source, opts, out)
        report.provenance = replace(report.provenance, command=command)
    write_csv(out / art.csv, art.row, report.rows)
    report.provenance.save(out)
    written = [out / art.csv, out / FILE, *(out / s for s in art.siblings if (out / s).exists())]
    return report, written + art.render(report, out)


def publish(art: Artefact[Any], written: list[Path], root: Path = Path(".")) -> str:
    """Copy a canonical run's files to ``reports/<folder>/`` unless its provenance forbids it; the
    line that says what happened."""
    here = written[0].parent
    problem = Provenance.load(here).problem()
    if problem:
        return f"reports/{art.folder}/ left as it is: {problem}; the report is in {here}/"
    dest = root / REPORTS / art.folder
    dest.mkdir(parents=True, exist_ok=True)
    for path in written:
        shutil.copy2(path, dest / path.name)
    return f"report: {dest}/"
