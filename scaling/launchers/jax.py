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

from typing import Dict, List

from scaling.launchers import Launcher, register_launcher, thread_env, worker_argv
from scaling.workers.jax_parallel import COORDINATOR_ENV


@register_launcher
class JaxMesh(Launcher):
    name = "jax"
    frameworks = ("jax",)
    data_parallel = "mesh"

    def command(self, cell, placement, cell_dir: str, python: str) -> List[str]:
        return worker_argv(python, cell, cell_dir)

    def ranks_per_node(self, cell) -> int:
        return 1

    def env(self, cell, placement) -> Dict[str, str]:
        return thread_env(cell.threads_per_device * cell.devices)


@register_launcher
class JaxDistributed(Launcher):
    name = "jax-distributed"
    frameworks = ("jax",)
    data_parallel = "distributed"
    multi_node = True

    def ranks_per_node(self, cell) -> int:
        return 1 if cell.device_type == "gpu" else cell.devices

    def command(self, cell, placement, cell_dir: str, python: str) -> List[str]:
        return [python, "-m", "scaling.workers.spawn",
                "--workers", ",".join(placement.rank_endpoints()),
                "--first-rank", str(placement.first_rank),
                "--processes", str(placement.ranks_per_host), "--",
                *worker_argv(python, cell, cell_dir)]

    def env(self, cell, placement) -> Dict[str, str]:
        devices = cell.devices if cell.device_type == "gpu" else 1
        return {**thread_env(cell.threads_per_device * devices),
                COORDINATOR_ENV: placement.rendezvous}
