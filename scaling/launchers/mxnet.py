"""MXNet data parallel over N contexts of one process, with a selectable kvstore."""

from __future__ import annotations

from typing import Dict

from scaling.launchers.base import Number, OneProcessPerNode, register_launcher, thread_env


@register_launcher
class MxnetKvstore(OneProcessPerNode):
    name = "mxnet-kvstore"
    frameworks = ("mxnet",)
    data_parallel = "kvstore"
    options = {"kvstore": ("device", "nccl", "local"),
               "bigarray_bound": Number(integer=True, unit="elements",
                                         tune=(100_000, 10_000_000))}
    gpu_only = {"kvstore": ("nccl",)}
    """``kvstore``: gradient aggregation; ``device`` by default on GPU, ``local`` on CPU (where
    ``nccl`` does not run). ``bigarray_bound``: MXNET_KVSTORE_BIGARRAY_BOUND, the size from
    which the kvstore splits an array to reduce it (MXNet's default: 1000000)."""

    def option_env(self, options: Dict) -> Dict[str, str]:
        bound = options.get("bigarray_bound")
        return {} if bound is None else {"MXNET_KVSTORE_BIGARRAY_BOUND": str(bound)}

    def env(self, cell, placement) -> Dict[str, str]:
        # Each op of a context uses the device's threads; the engine runs one op per context.
        return thread_env(cell.threads_per_device)
