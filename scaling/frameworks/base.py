"""Frameworks by name: what a framework needs, apart from the launchers that start it.

A framework entry names the package that is probed before a cell starts, how to install it, the
interpreter its workers run under, its worker module and the options its workers understand.
Adding a framework is one module that calls :func:`register_framework`, imported by the
package (``scaling.frameworks``).
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

from scaling import PROJECT_ROOT
from scaling.registry import Registry

@dataclass(frozen=True)
class Framework:
    name: str
    module: str
    """The package a worker imports; probed under the worker's interpreter before a cell runs."""
    install_hint: str
    worker: str
    """The worker module: ``python -m WORKER CELL_DIR`` runs one process of a cell."""
    models: str
    """The module of this framework's workload builders, one function per workload name; the
    worker finds it in its cell spec (``models``)."""
    default_launcher: str
    options: Dict[str, object] = field(default_factory=dict)
    """Options every launcher of this framework accepts: a type, or a tuple of the valid values."""
    env: Dict[str, str] = field(default_factory=dict)
    """Environment variables for every process of a cell."""
    python_env_var: Optional[str] = None
    """A variable that names the workers' interpreter, where it is not the harness's own."""
    venv: Optional[str] = None
    """The project's virtualenv for this framework, relative to the project root."""
    min_memory_limit: int = 0
    """The smallest CPU memory cap under which a worker starts and trains a tiny model."""
    packages: Tuple[str, ...] = ()
    """Distributions whose versions ``scaling devices`` shows under the workers' interpreter."""
    colour: str = "#7f7f7f"
    """The framework's colour in every figure."""

    def default_python(self) -> str:
        """The interpreter that runs this framework's workers unless configured otherwise."""
        if self.python_env_var and os.environ.get(self.python_env_var):
            return os.environ[self.python_env_var]
        if self.venv:
            return str(PROJECT_ROOT / self.venv / "bin" / "python")
        return sys.executable


FRAMEWORKS: Registry[Framework] = Registry("framework")


def register_framework(framework: Framework) -> Framework:
    return FRAMEWORKS.register(framework.name, framework)


get_framework = FRAMEWORKS.get
framework_names = FRAMEWORKS.names


@functools.lru_cache(maxsize=None)
def probe(python: str, check: str, missing: str, hint: str) -> Optional[str]:
    """Run the Python statement ``check`` under ``python``: None when it exits 0, otherwise
    ``missing`` (or why ``python`` could not run), then ``hint``."""
    try:
        found = subprocess.run([python, "-c", check], capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as error:
        return f"cannot run {python} ({error}); {hint}"
    return None if found.returncode == 0 else f"{missing}; {hint}"


def missing_framework(name: str, python: str) -> Optional[str]:
    """Why ``python`` cannot run this framework's workers, or None when it can."""
    framework = get_framework(name)
    return probe(python, "import importlib.util, sys; "
                 f"sys.exit(importlib.util.find_spec({framework.module!r}) is None)",
                 f"{framework.module} is not installed for {python}", framework.install_hint)
