"""MXNet data parallel over N contexts of one process, with a selectable kvstore.

MXNet 1.9.1 needs numpy<1.24, so its workers run under their own interpreter:
``frameworks.mxnet.python`` in a sweep, ``--python`` on the command line, the
``SCALING_MXNET_PYTHON`` environment variable, or by default ``.venv-mxnet/bin/python`` in the
project (``make mxnet-env`` creates it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List

from scaling.launchers import Launcher, register_launcher, thread_env

MXNET_ENV = Path(__file__).resolve().parents[2] / ".venv-mxnet"


@register_launcher
class MxnetKvstore(Launcher):
    name = "mxnet-kvstore"
    framework = "mxnet"
    module = "mxnet"
    install_hint = ("create its environment with: make mxnet-env (python3 -m venv .venv-mxnet "
                    "&& .venv-mxnet/bin/pip install mxnet==1.9.1 'numpy<1.24')")
    options = {"kvstore": ("device", "nccl", "local")}
    """``kvstore``: gradient aggregation; ``device`` by default on GPU, ``local`` on CPU."""

    def command(self, cell, cell_dir: str, python: str) -> List[str]:
        return [python, "-m", "scaling.workers.mxnet_worker", cell_dir]

    def processes(self, cell) -> int:
        return cell.nodes

    def env(self, cell) -> Dict[str, str]:
        # One engine worker thread per CPU context, each op using threads_per_device threads.
        return {**thread_env(cell.threads_per_device),
                "MXNET_CPU_WORKER_NTHREADS": "1", "MXNET_ENGINE_TYPE": "ThreadedEnginePerDevice"}

    def default_python(self) -> str:
        return os.environ.get("SCALING_MXNET_PYTHON", str(MXNET_ENV / "bin" / "python"))
