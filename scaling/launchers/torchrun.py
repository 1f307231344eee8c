"""PyTorch DistributedDataParallel under torchrun: one rank per device."""

from __future__ import annotations

from typing import List

from scaling.launchers import Launcher, register_launcher


@register_launcher
class Torchrun(Launcher):
    name = "torchrun"
    framework = "torch"
    module = "torch"
    install_hint = "install it with: pip install -e '.[torch]'"
    multi_node = True

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
