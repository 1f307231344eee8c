"""PyTorch DistributedDataParallel under torchrun: one rank per device, c10d rendezvous.

Its options are DistributedDataParallel's communication knobs (``scaling.workers.pytorch.
parallel`` passes them to the wrapper and reads back the values in effect)."""

from __future__ import annotations

from pathlib import Path
from typing import List

from scaling.launchers.base import Launcher, Number, register_launcher, worker_argv


@register_launcher
class Torchrun(Launcher):
    name = "torchrun"
    frameworks = ("torch",)
    options = {
        "bucket_cap_mb": Number(unit="MiB", tune=(5, 100)),
        "gradient_as_bucket_view": bool,
        "static_graph": bool,
        "broadcast_buffers": bool,
        "comm_hook": ("none", "fp16", "bf16"),
    }
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
            # The folder's name: the cell's id on every node, or a shared tree's own.
            "--rdzv-id", Path(cell_dir).name,
            # Node 0 holds the rendezvous store: said, not guessed from its host name (which
            # need not resolve to the address the others reach it at, as in a Ray or a
            # Kubernetes pod).
            "--rdzv-conf", f"is_host={int(placement.node_rank == 0)}",
            # Nodes that share a host name (several on one machine) say which address is theirs.
            *(["--local-addr", placement.hosts[placement.node_rank]]
              if placement.nodes > 1 and placement.hosts else []),
            *python_argv[1:],
        ]
