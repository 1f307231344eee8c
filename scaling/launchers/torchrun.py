"""PyTorch DistributedDataParallel under torchrun: one rank per device."""

from __future__ import annotations

from typing import Dict, List

from scaling.launchers import register_launcher, thread_env


@register_launcher
class Torchrun:
    name = "torchrun"
    framework = "torch"
    options: Dict[str, type] = {}

    def command(self, cell, cell_dir: str, python: str) -> List[str]:
        if cell.rendezvous is None:
            rendezvous = ["--standalone"]
        else:
            rendezvous = ["--rdzv-backend", "c10d", "--rdzv-endpoint", cell.rendezvous,
                          "--rdzv-id", cell.cell_id]
        return [
            python, "-m", "torch.distributed.run",
            "--nnodes", str(cell.nodes),
            "--nproc-per-node", str(cell.devices),
            "--max-restarts", "0",
            *rendezvous,
            "-m", "scaling.workers.torch_worker", cell_dir,
        ]

    def processes(self, cell) -> int:
        return cell.total_devices

    def env(self, cell) -> Dict[str, str]:
        return thread_env(cell.threads_per_device)
