"""MXNet data parallel over N contexts of one process, with a selectable kvstore."""

from __future__ import annotations

from typing import Dict

from scaling.launchers import OneProcessPerNode, register_launcher, thread_env


@register_launcher
class MxnetKvstore(OneProcessPerNode):
    name = "mxnet-kvstore"
    frameworks = ("mxnet",)
    data_parallel = "kvstore"
    options = {"kvstore": ("device", "nccl", "local")}
    """``kvstore``: gradient aggregation; ``device`` by default on GPU, ``local`` on CPU."""

    def env(self, cell, placement) -> Dict[str, str]:
        # Each op of a context uses the device's threads; the engine runs one op per context.
        return thread_env(cell.threads_per_device)
