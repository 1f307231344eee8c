"""PyTorch DistributedDataParallel under torchrun: one rank per device, c10d rendezvous."""

from __future__ import annotations

from typing import List

from scaling.launchers import Launcher, register_launcher, worker_argv


@register_launcher
class Torchrun(Launcher):
    name = "torchrun"
    frameworks = ("torch",)
    data_parallel = "ddp"
    multi_node = True
    bucket_bytes = 25 * 2**20
    """DistributedDataParallel's ``bucket_cap_mb`` default."""

    def command(self, cell, placement, cell_dir: str, python: str) -> List[str]:
        python_argv = worker_argv(python, cell, cell_dir)
        return [
            python, "-m", "torch.distributed.run",
            "--nnodes", str(placement.nodes),
            "--nproc-per-node", str(placement.ranks_per_host),
            "--max-restarts", "0",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", placement.rendezvous,
            "--rdzv-id", cell.cell_id,
            # Nodes that share a host name (several on one machine) say which address is theirs.
            *(["--local-addr", placement.hosts[placement.node_rank]]
              if placement.nodes > 1 and placement.hosts else []),
            *python_argv[1:],
        ]
