"""TensorFlow tf.distribute launchers.

``tf-mirrored``: one process per node, MirroredStrategy over its N devices (GPUs, or N logical
CPU devices). ``tf-multiworker``: MultiWorkerMirroredStrategy with one process per CPU device, or
one per node holding all of its GPUs; the harness's spawner gives each process its TF_CONFIG,
every rank on its own port from the placement's rendezvous port up.
"""

from __future__ import annotations

from typing import Dict

from scaling.launchers.base import (Number, OneProcessPerNode, SpawnedPerDevice, register_launcher,
                               thread_env)


@register_launcher
class TfMirrored(OneProcessPerNode):
    name = "tf-mirrored"
    frameworks = ("tensorflow",)
    data_parallel = "mirrored"
    options = {"cross_device_ops": ("auto", "reduce_to_one", "hierarchical_copy", "nccl")}
    gpu_only = {"cross_device_ops": ("nccl",)}
    """``cross_device_ops``: how the replicas' gradients are reduced; ``auto`` (the default) is
    NCCL on GPU and a reduction to one device on CPU, where NCCL does not run."""


@register_launcher
class TfMultiWorker(SpawnedPerDevice):
    name = "tf-multiworker"
    frameworks = ("tensorflow",)
    data_parallel = "multiworker"
    spawn_flags = ("--tf-config",)
    options = {"implementation": ("auto", "ring", "nccl"),
               "pack_mb": Number(unit="MiB", tune=(4, 32))}
    gpu_only = {"implementation": ("nccl",)}
    """``implementation``: the collectives' (unset: NCCL on GPU, ring on CPU, where NCCL does
    not run; ``auto``: TensorFlow's choice); ``pack_mb``: the size of the packs the gradients
    are all-reduced in (unset: TensorFlow's 0, all of a step's gradients in one pack)."""

    def env(self, cell, placement) -> Dict[str, str]:
        return thread_env(cell.threads_per_device)
