"""The tree keeps its shape: a small core, small modules, and workers that import nothing of the
harness outside ``scaling/workers/``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "scaling"
MODULES = sorted(PACKAGE.rglob("*.py"))


def test_at_most_twelve_modules_sit_directly_in_the_core():
    assert len(list(PACKAGE.glob("*.py"))) <= 12


@pytest.mark.parametrize("module", MODULES, ids=lambda path: str(path.relative_to(PACKAGE)))
def test_no_module_is_over_400_lines(module):
    assert len(module.read_text().splitlines()) <= 400


def imported_modules(path: Path):
    """Every module that ``path`` imports, at any depth of its code."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


@pytest.mark.parametrize("worker", sorted((PACKAGE / "workers").glob("*.py")),
                         ids=lambda path: path.name)
def test_workers_import_from_the_harness_only_inside_workers(worker):
    harness = [name for name in imported_modules(worker)
               if name.split(".")[0] == "scaling" and not name.startswith("scaling.workers")]
    assert harness == []
