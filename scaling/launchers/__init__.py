"""Launchers by name. Each one turns a cell into the argv and environment that start its ranks."""

from __future__ import annotations

from typing import Dict, List, Protocol

from scaling.errors import ScalingError


class Launcher(Protocol):
    name: str
    framework: str
    options: Dict[str, type]
    """Framework options this launcher's workers understand, with their types."""

    def command(self, cell, cell_dir: str, python: str) -> List[str]:
        """The argv that starts every rank of ``cell`` on this node."""

    def processes(self, cell) -> int:
        """How many processes report results: one per rank."""

    def env(self, cell) -> Dict[str, str]:
        """Environment variables added for this cell's processes."""


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
        if not isinstance(value, launcher.options[key]):
            raise ScalingError(f"option {key} takes a {launcher.options[key].__name__}, "
                               f"got {value!r}")


from scaling.launchers import tensorflow, torchrun  # noqa: E402,F401  (register launchers)
