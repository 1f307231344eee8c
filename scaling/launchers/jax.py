"""JAX launchers.

``jax``: one process over all of a node's devices; the step is one ``jax.jit`` over a one-axis
device mesh, the batch sharded over it (``NamedSharding``), the parameters replicated. On CPU
the devices are host devices, each with its share of the process's cores.

``jax-distributed``: one process per CPU device, or one per node holding all of its GPUs, joined
by ``jax.distributed.initialize`` at the coordinator that rank 0 serves at the placement's
rendezvous (as torchrun's rendezvous is served), locally or over the nodes of a Slurm job; the
same mesh then spans every process's devices, and on CPU the collectives go through gloo. The
harness's spawner gives each process its rank and the world size.
"""

from __future__ import annotations

from typing import Dict

from scaling.launchers.base import (Number, OneProcessPerNode, SpawnedPerDevice, register_launcher,
                               thread_env)
from scaling.workers.jax.parallel import COORDINATOR_ENV

COMBINE = {"all_reduce_combine_mb": Number(zero_ok=True, unit="MiB", tune=(0, 256))}
"""XLA's all-reduce combining threshold on GPU (``scaling.workers.jax.communication``); a CPU
cell with it ends ``error``, as XLA's CPU backend has none."""


@register_launcher
class JaxMesh(OneProcessPerNode):
    name = "jax"
    frameworks = ("jax",)
    data_parallel = "mesh"
    options = COMBINE
    gpu_only = {"all_reduce_combine_mb": None}


@register_launcher
class JaxDistributed(SpawnedPerDevice):
    name = "jax-distributed"
    frameworks = ("jax",)
    data_parallel = "distributed"
    options = COMBINE
    gpu_only = {"all_reduce_combine_mb": None}

    def env(self, cell, placement) -> Dict[str, str]:
        devices = cell.devices if cell.device_type == "gpu" else 1
        return {**thread_env(cell.threads_per_device * devices),
                COORDINATOR_ENV: placement.rendezvous}
