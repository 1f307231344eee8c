"""TensorFlow tf.distribute launchers.

``tf-mirrored``: one process per node, MirroredStrategy over its N devices (GPUs, or N logical
CPU devices). ``tf-multiworker``: MultiWorkerMirroredStrategy with one process per CPU device, or
one per node holding all of its GPUs; the harness's spawner gives each process its TF_CONFIG,
every rank on its own port from the placement's rendezvous port up.
"""

from __future__ import annotations

from typing import Dict, List

from scaling.launchers import Launcher, register_launcher, thread_env, worker_argv


@register_launcher
class TfMirrored(Launcher):
    name = "tf-mirrored"
    frameworks = ("tensorflow",)
    data_parallel = "mirrored"

    def command(self, cell, placement, cell_dir: str, python: str) -> List[str]:
        return worker_argv(python, cell, cell_dir)

    def ranks_per_node(self, cell) -> int:
        return 1

    def env(self, cell, placement) -> Dict[str, str]:
        return thread_env(cell.threads_per_device * cell.devices)


@register_launcher
class TfMultiWorker(Launcher):
    name = "tf-multiworker"
    frameworks = ("tensorflow",)
    data_parallel = "multiworker"
    multi_node = True

    def ranks_per_node(self, cell) -> int:
        return 1 if cell.device_type == "gpu" else cell.devices

    def command(self, cell, placement, cell_dir: str, python: str) -> List[str]:
        return [python, "-m", "scaling.workers.spawn", "--tf-config",
                "--workers", ",".join(placement.rank_endpoints()),
                "--first-rank", str(placement.first_rank),
                "--processes", str(placement.ranks_per_host), "--",
                *worker_argv(python, cell, cell_dir)]

    def env(self, cell, placement) -> Dict[str, str]:
        return thread_env(cell.threads_per_device)
