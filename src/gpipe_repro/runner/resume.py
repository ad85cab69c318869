"""What ``train.resume`` does, decided once by the run's owner, said in one line and recorded.

Before any rank starts, the owner picks the save (``auto``: this run's newest *intact* one — a newer
one that is corrupt is named, moved aside as ``save-<N>.corrupt-<id>`` so this run's own save of
that step never replaces it silently, and the run falls back to the one before; a path: that save,
which must be intact) and checks it against the run: a save made with another ``train.batch_size``,
another data order (``seed``, the ``data`` options — M and K change nothing of it) or another model
would mix two runs in one loss curve, so it is refused in one line naming both values — unless
``train.resume_allow`` lists what may differ; then the run goes on and ``metrics.json``'s ``resume``
records what differed. The save is then handed to every rank by its path (the plan's spec), so no
rank picks another. The line says what happened: resumed from a save at a step, started fresh, or
fell back from a corrupt save.
"""

from __future__ import annotations

import sys
import uuid
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from ..config import RunConfig
from ..metrics.contract import ResumeInfo
from ..runplan.plan import RunPlan
from ..save import SaveError, open_save, resolve
from ..save.folder import SaveFolder, marked
from ..save.record import run_differences
from .folder import FolderInUse

__all__ = ["ResumeRefused", "decide"]


class ResumeRefused(FolderInUse):
    """The save differs from the run in what ``train.resume_allow`` does not list: nothing was run,
    nothing written (the folder's run stays as it is)."""


def _saves_dir(spec: RunConfig, out: Path) -> Path:
    return Path(spec.train.save_dir) if spec.train.save_dir else out / "saves"


def _pick(value: str, directory: Path, run: str | None) -> tuple[SaveFolder | None, list[str]]:
    """The save to resume from (None: none, a fresh start) and the corrupt saves passed over."""
    if value != "auto":
        path = resolve(value, directory)
        assert path is not None
        return open_save(path), []  # an explicit save must be intact: SaveError, one line
    corrupt: list[str] = []
    for _, path in marked(directory, run):
        try:
            return open_save(path), corrupt
        except SaveError as err:
            aside = path.with_name(f"{path.name}.corrupt-{uuid.uuid4().hex[:6]}")
            path.rename(aside)  # kept, out of the way of this run's own save of that step
            corrupt.append(f"{err} (kept as {aside.name})")
    return None, corrupt


def _words(diffs: dict[str, dict[str, list[Any]]]) -> str:
    return ", ".join(f"{k}={a} (this run: {b})" for d in diffs.values() for k, (a, b) in d.items())


def decide(planned: RunPlan, out: Path, run: str | None) -> tuple[RunPlan, ResumeInfo | None]:
    """The plan with ``train.resume`` pinned to the chosen save's path (None where the run starts
    fresh) and what to record; says what it does on stderr. Raises ``ResumeRefused`` (one line,
    nothing written) for a save that differs from the run in what ``train.resume_allow`` does not
    list, and SaveError (the run fails) for an explicit save that is not intact."""
    spec = planned.spec
    if spec.train.resume is None:
        return planned, None
    directory = _saves_dir(spec, out)
    save, corrupt = _pick(spec.train.resume, directory, run)
    said = list(corrupt)
    if save is None:
        said.append(f"no intact save of this run in {directory}: started fresh")
        _say("; ".join(said))
        train = replace(spec.train, resume=None)
        info = ResumeInfo(save=None, step=0, corrupt=corrupt)
        return replace(planned, spec=replace(spec, train=train)), info
    diffs = run_differences(save.meta, asdict(spec))
    refused = {k: v for k, v in diffs.items() if k not in spec.train.resume_allow}
    if refused:
        if said:  # the corrupt saves passed over are said before the refusal
            _say("; ".join(said))
        allow = ",".join([*spec.train.resume_allow, *refused])
        raise ResumeRefused(
            f"train.resume: {save.path} was made with {_words(refused)}; resuming would mix two "
            f"runs in one loss curve: resume with the save's values, or allow it with "
            f"train.resume_allow=[{allow}] (recorded in metrics.json)"
        )
    total = spec.train.steps
    line = f"resumed from {save.path.name} at step {save.step} of {total} ({save.path})"
    if corrupt:
        line = f"fell back: {line}"
    if diffs:
        line += f"; allowed by train.resume_allow: {_words(diffs)}"
    _say("; ".join([*said, line]))
    allowed = {k: v for d in diffs.values() for k, v in d.items()}
    info = ResumeInfo(save=str(save.path), step=save.step, corrupt=corrupt, allowed=allowed)
    train = replace(spec.train, resume=str(save.path))
    return replace(planned, spec=replace(spec, train=train)), info


def _say(line: str) -> None:
    print(f"gpipe-run: resume: {line}", file=sys.stderr, flush=True)
