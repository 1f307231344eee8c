"""The allreduce of a PyTorch process's data-parallel mechanism (``scaling.workers.collective``),
for the allreduce timed after a window and for a cell of purpose ``allreduce``."""

from __future__ import annotations

from scaling.workers import common
from scaling.workers.pytorch import device as torch_device
from scaling.workers.pytorch.parallel import PARALLEL


class TorchCollective:
    """The allreduce of a data-parallel mechanism (``scaling.workers.collective``):
    torch.distributed's (gloo on CPU, NCCL on GPU) or Horovod's, on one rank's device."""

    def __init__(self, torch, parallel, device):
        self.torch, self.parallel, self.device = torch, parallel, device
        self.devices = parallel.size()
        self.buffer = None

    def prepare(self, count: int) -> None:
        self.buffer = self.torch.ones(count, dtype=self.torch.float32, device=self.device)

    def allreduce(self) -> None:
        self.parallel.sum_in_place(self.buffer)

    def first_value(self) -> float:
        return self.buffer[0].item()

    def zero(self) -> None:
        self.buffer.zero_()

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        self.parallel.barrier()

    def finish(self) -> dict:
        self.parallel.finish()
        return {}


def collective(cell: dict, report: dict, rank: int) -> TorchCollective:
    """The collective alone, for a cell of purpose ``allreduce``."""
    import torch

    device = torch_device.claim(torch, cell, common.process_ranks()[1])
    parallel = PARALLEL[cell["data_parallel"]](cell["device_type"] == "gpu", cell["options"])
    report.update(versions={"torch": torch.__version__, **parallel.versions},
                  device_name=torch_device.device_name(torch, device))
    return TorchCollective(torch, parallel, device)
