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
    """Beside their own package, workers take only the atomic writes, a standard-library core
    module."""
    harness = [name for name in imported_modules(worker)
               if name.split(".")[0] == "scaling" and not name.startswith("scaling.workers")
               and name != "scaling.atomic"]
    assert harness == []


def test_no_module_of_the_package_imports_itself_through_others():
    """Import circles: none, counting imports inside functions too. A package's own
    ``__init__`` importing its plug-in modules counts like any other import."""
    modules = {".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
               .removesuffix(".__init__"): path for path in MODULES}

    def known(name):
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph = {name: {known(found) for found in imported_modules(path)
                    if found.startswith("scaling")} - {name, ""}
             for name, path in modules.items()}
    for name in graph:  # a from-import of a submodule names it: ``from scaling.x import y``
        graph[name] |= {f"{other}.{leaf}" for other in list(graph[name])
                        for leaf in _from_names(modules[name], other)
                        if f"{other}.{leaf}" in modules}
    circles = []
    for start in sorted(graph):
        seen, stack = set(), [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    circles.append(" -> ".join(path + [start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
    assert circles == []


def _from_names(path: Path, module: str):
    """The names that ``path`` imports ``from module``."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == module and node.level == 0:
            yield from (alias.name for alias in node.names)


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
