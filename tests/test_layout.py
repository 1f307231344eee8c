"""The tree keeps its shape: a small core, small modules, one worker package per framework with
classes that read in one sitting, and workers that import nothing of the harness outside
``scaling/workers/``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from scaling.frameworks import FRAMEWORKS

PACKAGE = Path(__file__).resolve().parents[1] / "scaling"
MODULES = sorted(PACKAGE.rglob("*.py"))
WORKERS = sorted((PACKAGE / "workers").rglob("*.py"))


def relative(path: Path) -> str:
    return str(path.relative_to(PACKAGE))


def test_at_most_twelve_modules_sit_directly_in_the_core():
    assert len(list(PACKAGE.glob("*.py"))) <= 12


@pytest.mark.parametrize("module", MODULES, ids=relative)
def test_no_module_is_over_400_lines(module):
    assert len(module.read_text().splitlines()) <= 400


def imported_modules(path: Path):
    """Every module that ``path`` imports, at any depth of its code."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


@pytest.mark.parametrize("worker", WORKERS, ids=relative)
def test_workers_import_from_the_harness_only_inside_workers(worker):
    harness = [name for name in imported_modules(worker)
               if name.split(".")[0] == "scaling" and not name.startswith("scaling.workers")]
    assert harness == []


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_each_framework_runs_its_workers_from_a_package_of_its_own(framework):
    worker = FRAMEWORKS.get(framework).worker
    package = PACKAGE.parent.joinpath(*worker.split("."))
    assert package.parent == PACKAGE / "workers"
    assert (package / "__init__.py").is_file() and (package / "__main__.py").is_file()


def test_no_module_beside_the_framework_packages_is_named_for_a_framework():
    prefixes = ("torch_", "tf_", "tensorflow_", "jax_", "mxnet_")
    assert [path.name for path in (PACKAGE / "workers").glob("*.py")
            if path.name.startswith(prefixes)] == []


@pytest.mark.parametrize("worker", WORKERS, ids=relative)
def test_no_worker_class_is_over_150_lines(worker):
    sizes = {node.name: node.end_lineno - node.lineno + 1
             for node in ast.walk(ast.parse(worker.read_text()))
             if isinstance(node, ast.ClassDef)}
    assert {name: size for name, size in sizes.items() if size > 150} == {}
