"""The baseline of every curve: one process on one device, with no data-parallel wrapper, for
every framework. The same model, timed loop, options and modes as the framework's other
launchers; only the wrapper (DDP, Horovod, a strategy, a kvstore) is missing, so a launcher's
one-device cell against this one is what going parallel costs."""

from __future__ import annotations

from typing import List

from scaling.frameworks import FRAMEWORKS
from scaling.launchers.base import Launcher, register_launcher, worker_argv

BASELINE_LAUNCHER = "single"
"""The launcher of every curve's baseline."""


@register_launcher
class Single(Launcher):
    name = BASELINE_LAUNCHER
    frameworks = ()
    data_parallel = "none"
    max_devices = 1

    def starts(self, framework: str) -> bool:
        """Every registered framework, the ones added later too."""
        return framework in FRAMEWORKS

    def command(self, cell, placement, cell_dir: str, python: str) -> List[str]:
        return worker_argv(python, cell, cell_dir)
