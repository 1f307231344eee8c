"""MXNet data parallel over N contexts of one process, with a selectable kvstore."""

from __future__ import annotations

from typing import Dict, List

from scaling.launchers import Launcher, register_launcher, thread_env, worker_argv


@register_launcher
class MxnetKvstore(Launcher):
    name = "mxnet-kvstore"
    frameworks = ("mxnet",)
    data_parallel = "kvstore"
    options = {"kvstore": ("device", "nccl", "local")}
    """``kvstore``: gradient aggregation; ``device`` by default on GPU, ``local`` on CPU."""

    def command(self, cell, placement, cell_dir: str, python: str) -> List[str]:
        return worker_argv(python, cell, cell_dir)

    def ranks_per_node(self, cell) -> int:
        return 1

    def env(self, cell, placement) -> Dict[str, str]:
        # Each op of a context uses the device's threads; the engine runs one op per context.
        return thread_env(cell.threads_per_device)
