"""TensorFlow tf.distribute launchers.

``tf-mirrored``: one process per node, MirroredStrategy over its N devices (GPUs, or N logical
CPU devices). ``tf-multiworker``: MultiWorkerMirroredStrategy with one process per CPU device, or
one per node holding all of its GPUs; the harness's spawner gives each process its TF_CONFIG,
every rank on its own port from the placement's rendezvous port up.
"""

from __future__ import annotations

from typing import Dict

from scaling.launchers import (OneProcessPerNode, SpawnedPerDevice, register_launcher,
                               thread_env)


@register_launcher
class TfMirrored(OneProcessPerNode):
    name = "tf-mirrored"
    frameworks = ("tensorflow",)
    data_parallel = "mirrored"


@register_launcher
class TfMultiWorker(SpawnedPerDevice):
    name = "tf-multiworker"
    frameworks = ("tensorflow",)
    data_parallel = "multiworker"
    spawn_flags = ("--tf-config",)

    def env(self, cell, placement) -> Dict[str, str]:
        return thread_env(cell.threads_per_device)
