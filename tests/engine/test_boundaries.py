"""The engine stays free of Hydra, files and wandb: config objects stop at the harness's edge."""

from __future__ import annotations

import ast
from pathlib import Path

import gpipe_repro.engine as engine

ENGINE = Path(engine.__file__).parent
FORBIDDEN_MODULES = ("hydra", "omegaconf", "wandb", "submitit", "pathlib", "json", "yaml")
FORBIDDEN_CALLS = ("open",)


def _imports_and_calls(path: Path) -> tuple[set[str], set[str], set[str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    absolute: set[str] = set()
    relative: set[str] = set()
    calls: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            absolute |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                absolute.add(node.module.split(".")[0])
            elif node.level >= 2:  # from ..x: reaching out of the engine package
                relative.add(f"{'.' * node.level}{node.module or ''}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            calls.add(node.func.id)
    return absolute, relative, calls


def test_the_engine_imports_no_harness_and_opens_no_file():
    files = sorted(ENGINE.glob("*.py"))
    assert len(files) > 10  # the engine's modules were found
    for f in files:
        absolute, relative, calls = _imports_and_calls(f)
        assert not absolute & set(FORBIDDEN_MODULES), (f.name, absolute & set(FORBIDDEN_MODULES))
        assert "gpipe_repro" not in absolute and not relative, (f.name, relative)
        assert not calls & set(FORBIDDEN_CALLS), (f.name, calls & set(FORBIDDEN_CALLS))
