"""``python -m gpipe_repro.paper NAME [--from SWEEP_OR_CSV] [--out DIR | --publish] [options of NAME]``.

The one entry point of every paper artefact (``paper.registry``) and of its make target. Without
``--from`` an artefact collects its own runs (Table 1 plans, Tables 2-3 read the published sweeps,
Table 4 runs its jobs, the validation measures); with ``--from`` it collects a sweep folder (or Table
4's work folder), or re-renders from its own CSV. ``--publish`` — the make target's — writes
``reports/<folder>/`` (``artefact.publish``); anything else writes to ``--out`` (default beside the
sweep, or ``outputs/<name>/``) and says so.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import UserError
from .artefact import REPORTS, make, publish
from .origin import mismatch
from .registry import ARTEFACTS


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m gpipe_repro.paper", description="Make a paper artefact's report."
    )
    sub = ap.add_subparsers(dest="name", required=True, metavar="NAME")
    for name, art in ARTEFACTS.items():
        p = sub.add_parser(name, help=art.about)
        p.add_argument(
            "--from",
            dest="source",
            type=Path,
            help="a sweep (or work) folder to collect, or the artefact's own CSV to re-render",
        )
        where = p.add_mutually_exclusive_group()
        where.add_argument("--out", type=Path, help="where to write (never under reports/)")
        where.add_argument(
            "--publish", action="store_true", help=f"write reports/{art.folder}/ (make {name})"
        )
        art.options(p)
    return ap


def _refusal(opts: argparse.Namespace) -> str | None:
    """Why this invocation may not write where it asks to, or None."""
    art = ARTEFACTS[opts.name]
    if opts.out is not None and REPORTS.resolve() in [
        opts.out.resolve(),
        *opts.out.resolve().parents,
    ]:
        return (
            f"--out {opts.out} is under {REPORTS}/, which only `make {art.name}` writes "
            f"(--publish); leave --out out to write to {art.work(opts)}"
        )
    if not opts.publish:
        return None
    if art.sweep:
        return f"--publish: a sweep is published by its make target (`{art.command}`) alone"
    if opts.source is not None:
        return f"--publish is for `make {art.name}` alone; with --from {opts.source} use --out"
    variant = art.variant(opts)
    if variant:
        return f"--publish is for `make {art.name}` alone; this run changes {variant.replace('_', ' ')}"
    return None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    opts = _parser().parse_args(args)
    art = ARTEFACTS[opts.name]
    refusal = art.check(opts) or _refusal(opts)
    if refusal:
        print(f"{art.name}: error: {refusal}", file=sys.stderr)
        return 2
    src: Path | None = opts.source
    if src is not None and not src.exists():
        print(f"{art.name}: error: --from {src} does not exist", file=sys.stderr)
        return 2
    wrong = mismatch(art.name, src, ARTEFACTS) if src is not None and src.suffix == ".csv" else None
    if wrong:  # another artefact's CSV: say whose
        print(f"{art.name}: error: {wrong}", file=sys.stderr)
        return 2
    out = opts.out or (src / "report" if src is not None and src.is_dir() else art.work(opts))
    try:
        _, written = make(art, src, out, opts, " ".join(["python -m gpipe_repro.paper", *args]))
    except UserError as err:
        print(f"{art.name}: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(
            f"{art.name}: stopped; what finished is kept and the same command continues",
            file=sys.stderr,
        )
        return 130
    print("\n".join(str(p) for p in written))
    if opts.publish:
        line = publish(art, written)
        print(line)
        return 0 if line.startswith("report:") else 1
    publisher = getattr(art, "publisher", f"make {art.name}")  # paper.sweep.Sweep names its own
    why = f"only `{publisher}` writes it" if publisher else "a sweep's table is never published"
    print(f"{REPORTS}/{art.folder}/ left as it is ({why}): the report is in {out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
