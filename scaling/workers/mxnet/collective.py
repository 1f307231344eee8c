"""The allreduce of an MXNet process's data-parallel mechanism (``scaling.workers.collective``),
for the allreduce timed after a window and for a cell of purpose ``allreduce``."""

from __future__ import annotations

from scaling.workers.mxnet import device as mxnet_device
from scaling.workers.mxnet.parallel import PARALLEL


class MxnetCollective:
    """The allreduce of a mechanism (``scaling.workers.collective``): a kvstore's ``pushpull``
    over this process's contexts, or Horovod's allreduce; one array per context."""

    def __init__(self, mx, parallel, contexts):
        self.mx, self.parallel, self.contexts = mx, parallel, contexts
        self.devices = int(parallel.total(mx, float(len(contexts))))
        self.arrays, self._sum = [], None

    def prepare(self, count: int) -> None:
        self.arrays = [self.mx.nd.ones((count,), ctx=context) for context in self.contexts]
        self._sum = self.parallel.summer(self.mx, self.arrays)

    def allreduce(self) -> None:
        self._sum()

    def first_value(self) -> float:
        return float(self.arrays[0][0].asscalar())

    def zero(self) -> None:
        for array in self.arrays:
            array[:] = 0

    def synchronize(self) -> None:
        self.mx.nd.waitall()

    def barrier(self) -> None:
        self.parallel.total(self.mx, 1.0)

    def finish(self) -> dict:
        self.parallel.finish()
        return {}


def collective(cell: dict, report: dict, rank: int) -> MxnetCollective:
    """The collective alone, for a cell of purpose ``allreduce``."""
    import mxnet as mx

    parallel = PARALLEL[cell["data_parallel"]](cell)
    contexts = mxnet_device.contexts(mx, cell, parallel.first_gpu)
    report.update(versions={"mxnet": mx.__version__, **parallel.versions},
                  device_name=str(contexts[0]), kvstore=parallel.kvstore)
    return MxnetCollective(mx, parallel, contexts)
