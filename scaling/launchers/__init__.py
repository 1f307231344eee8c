"""Launchers by name. Each one turns a cell into the argv and environment that start its ranks."""

from __future__ import annotations

import functools
import subprocess
import sys
from typing import Dict, List, Optional

from scaling.errors import ScalingError


class Launcher:
    """A way to start a cell's ranks. Subclasses set the class attributes and ``command``."""

    name: str
    framework: str
    module: str
    """The package a worker imports; checked before a cell starts."""
    install_hint: str
    options: Dict[str, object] = {}
    """Framework options this launcher's workers understand: a type, or a tuple of values."""
    multi_node: bool = False
    """Whether ranks can span nodes through a rendezvous endpoint."""

    def command(self, cell, cell_dir: str, python: str) -> List[str]:
        """The argv that starts every rank of ``cell`` on this node."""
        raise NotImplementedError

    def processes(self, cell) -> int:
        """How many processes report results: one per rank."""
        return cell.total_devices

    def env(self, cell) -> Dict[str, str]:
        """Environment variables added for this cell's processes."""
        return thread_env(cell.threads_per_device)

    def default_python(self) -> str:
        """The interpreter that runs this framework's workers unless configured otherwise."""
        return sys.executable


LAUNCHERS: Dict[str, Launcher] = {}


def register_launcher(cls):
    """Class decorator: register an instance of ``cls`` under ``cls.name``."""
    if cls.name in LAUNCHERS:
        raise ValueError(f"launcher {cls.name!r} is registered twice")
    LAUNCHERS[cls.name] = cls()
    return cls


def get_launcher(name: str) -> Launcher:
    try:
        return LAUNCHERS[name]
    except KeyError:
        raise ScalingError(
            f"unknown launcher {name!r}; valid launchers: {', '.join(sorted(LAUNCHERS))}"
        ) from None


def frameworks() -> List[str]:
    return sorted({launcher.framework for launcher in LAUNCHERS.values()})


def thread_env(threads: int) -> Dict[str, str]:
    """Thread budget of one device's worker, for the math libraries that read it."""
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def check_options(launcher: Launcher, options: Dict) -> None:
    for key, value in options.items():
        if key not in launcher.options:
            valid = ", ".join(sorted(launcher.options)) or "none"
            raise ScalingError(f"unknown option {key!r} for {launcher.name}; valid options: {valid}")
        allowed = launcher.options[key]
        if isinstance(allowed, tuple):
            if value not in allowed:
                raise ScalingError(f"option {key} takes one of {', '.join(allowed)}; "
                                   f"got {value!r}")
        elif not isinstance(value, allowed):
            raise ScalingError(f"option {key} takes a {allowed.__name__}, got {value!r}")


@functools.lru_cache(maxsize=None)
def missing_framework(launcher_name: str, python: str) -> Optional[str]:
    """Why ``python`` cannot run this launcher's workers, or None when it can."""
    launcher = get_launcher(launcher_name)
    probe = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({launcher.module!r}) is None)"
    try:
        found = subprocess.run([python, "-c", probe], capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as error:
        return f"cannot run {python} ({error}); {launcher.install_hint}"
    if found.returncode != 0:
        return f"{launcher.module} is not installed for {python}; {launcher.install_hint}"
    return None


from scaling.launchers import mxnet, tensorflow, torchrun  # noqa: E402,F401  (registration)
