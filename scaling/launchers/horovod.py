"""Horovod over gloo, for PyTorch, TensorFlow and MXNet: one process per device.

On one node the ranks start under ``horovodrun --gloo -np N -H localhost:N``. Over several
nodes (a Slurm allocation, where each node runs its own part of the cell) the harness's spawner
starts each node's ranks with Horovod's gloo environment, and node 0's spawner serves the gloo
rendezvous at the placement's rendezvous endpoint.

Each framework's Horovod build lives with the interpreter that runs its workers: torch in the
main environment, TensorFlow 2.15.1 in ``.venv-tf215`` (Horovod 0.28.1 does not build against
later TensorFlow), MXNet in ``.venv-mxnet``; ``make horovod-env`` builds all three. The worker
reads its data-parallel mechanism from the cell (``data_parallel: horovod``).

The options ``fusion_threshold_mb`` and ``cycle_time_ms`` set ``HOROVOD_FUSION_THRESHOLD``
(bytes) and ``HOROVOD_CYCLE_TIME`` (ms) for every rank, over any value the user exported;
``compression`` is the ``hvd.Compression`` that the framework's optimizer, tape or trainer
applies to the gradients.
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional

from scaling.errors import ScalingError
from scaling.frameworks import probe
from scaling.launchers.base import Launcher, Number, register_launcher, thread_env, worker_argv

BUILD_HINT = "build it with: make horovod-env"

_LIBRARY = {"torch": "torch/mpi_lib_v2*", "tensorflow": "tensorflow/mpi_lib*",
            "mxnet": "mxnet/mpi_lib*"}
"""The compiled part of Horovod's binding for each framework, inside the horovod package."""


def missing_build(framework: str, python: str) -> Optional[str]:
    """Why ``python`` has no Horovod built for ``framework``, or None when it has one."""
    return probe(python, "import importlib.util, pathlib, sys; "
                 "spec = importlib.util.find_spec('horovod'); "
                 "sys.exit(spec is None or not any(pathlib.Path("
                 f"spec.submodule_search_locations[0]).glob({_LIBRARY[framework]!r})))",
                 f"Horovod is not built for {framework} under {python}", BUILD_HINT)


@register_launcher
class Horovod(Launcher):
    name = "horovod"
    frameworks = ("torch", "tensorflow", "mxnet")
    options = {
        "timeline": bool,
        "fusion_threshold_mb": Number(zero_ok=True, unit="MiB, 0: no fusion", tune=(0, 32)),
        "cycle_time_ms": Number(unit="ms", tune=(0.5, 10)),
        "compression": ("none", "fp16"),
    }
    multi_node = True
    data_parallel = "horovod"
    venvs = {"tensorflow": ".venv-tf215"}
    build_hint = BUILD_HINT
    packages = ("horovod",)
    bucket_bytes = 128 * 2**20
    """Horovod's tensor-fusion threshold in the 0.28 this project builds (HOROVOD_FUSION_THRESHOLD
    overrides it; a cell's ``fusion_threshold_mb`` sets it for that cell)."""

    def gradient_bucket_bytes(self) -> Optional[int]:
        override = os.environ.get("HOROVOD_FUSION_THRESHOLD")
        return int(override) if override and override.isdigit() else self.bucket_bytes

    def option_env(self, options: Dict) -> Dict[str, str]:
        env = {}
        if options.get("fusion_threshold_mb") is not None:
            env["HOROVOD_FUSION_THRESHOLD"] = str(int(options["fusion_threshold_mb"] * 2**20))
        if options.get("cycle_time_ms") is not None:
            env["HOROVOD_CYCLE_TIME"] = f"{options['cycle_time_ms']:g}"
        return env

    def command(self, cell, placement, cell_dir: str, python: str) -> List[str]:
        timeline = f"{cell_dir}/horovod-timeline.json" if cell.options.get("timeline") else None
        if placement.nodes == 1:
            ranks = placement.ranks_per_host
            return [python, "-m", "horovod.runner.launch", "--gloo", "-np", str(ranks),
                    "-H", f"localhost:{ranks}",
                    *(["--timeline-filename", timeline] if timeline else []),
                    *worker_argv(python, cell, cell_dir)]
        if len(placement.hosts) != placement.nodes:
            raise ScalingError(f"horovod over several nodes addresses every node: name the "
                               f"{placement.nodes} nodes' hosts (--hosts)")
        return [python, "-m", "scaling.workers.spawn", "--horovod",
                "--hosts", ",".join(placement.hosts), "--node-rank", str(placement.node_rank),
                "--rendezvous", placement.rendezvous,
                "--first-rank", str(placement.first_rank),
                "--processes", str(placement.ranks_per_host),
                *(["--timeline", timeline] if timeline else []), "--",
                *worker_argv(python, cell, cell_dir)]

    def missing(self, framework: str, python: str) -> Optional[str]:
        return missing_build(framework, python)

    def env(self, cell, placement) -> Dict[str, str]:
        # horovodrun forwards its ranks' output through its own stdout: unbuffered, so that
        # what it forwarded is in the log when a timeout kills the tree.
        return {**thread_env(cell.threads_per_device), "PYTHONUNBUFFERED": "1"}
