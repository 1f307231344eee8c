"""How one PyTorch process is data-parallel: a class per value of the cell's ``data_parallel``
(``none``, ``ddp``, ``horovod``): wrapping the model and optimizer, waiting for the gradients,
barriers, a maximum and a sum over the ranks, and leaving.

On CPU with ``profile`` on, the mechanism times the communication that the profiler's trace
cannot see (gloo's work runs outside it), ``time_exposure``: under ``ddp`` a communication hook
times each gradient bucket's allreduce, and a step's exposed communication is how long the last
allreduce ran on after the last bucket was ready, which the backward pass had to wait for;
under ``horovod`` it is how long the step waited in ``synchronize`` for the allreduces that
Horovod's background thread had not finished when the backward pass ended.
"""

from __future__ import annotations

import contextlib
import time
from typing import List, Optional, Tuple


class NoParallel:
    """One process on one device with no data-parallel wrapper: the ``single`` baseline."""

    versions: dict = {}

    def __init__(self, is_gpu: bool):
        pass

    def wrap(self, model, optimizer, device_ids):
        return model, optimizer

    def gradients_reduced(self, optimizer):
        """There is nothing to reduce."""
        return contextlib.nullcontext()

    def barrier(self) -> None:
        """No other process to wait for."""

    def max(self, value):
        return value

    def finish(self) -> None:
        """No process group to leave."""


class DdpParallel:
    """DistributedDataParallel over a torch.distributed process group."""

    def __init__(self, is_gpu: bool):
        import torch.distributed as dist

        self.dist = dist
        self.versions = {}
        self.bucket_times: List[Tuple[float, float]] = []
        dist.init_process_group(backend="nccl" if is_gpu else "gloo")

    def wrap(self, model, optimizer, device_ids):
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=device_ids), optimizer

    def time_exposure(self, model) -> None:
        """Time every bucket's allreduce from now on (:func:`timed_allreduce`)."""
        model.register_comm_hook(self, timed_allreduce)

    def exposed_s(self) -> float:
        """How long the allreduces timed since the last call ran on after the last bucket was
        ready; the times are cleared."""
        times, self.bucket_times = self.bucket_times, []
        if not times:
            return 0.0
        return max(0.0, max(done for _, done in times) - max(ready for ready, _ in times))

    def gradients_reduced(self, optimizer):
        """DDP reduces the gradients inside backward: stepping needs nothing more."""
        return contextlib.nullcontext()

    def barrier(self) -> None:
        self.dist.barrier()

    def max(self, value):
        self.dist.all_reduce(value, op=self.dist.ReduceOp.MAX)
        return value

    def sum_in_place(self, tensor) -> None:
        self.dist.all_reduce(tensor)

    def size(self) -> int:
        return self.dist.get_world_size()

    def finish(self) -> None:
        self.dist.destroy_process_group()


class HorovodParallel:
    """Horovod: the optimizer allreduces gradients as backward produces them."""

    def __init__(self, is_gpu: bool):
        """NCCL on GPU where the build has it, gloo otherwise: Horovod picks at build time."""
        import horovod
        import horovod.torch as hvd

        self.hvd = hvd
        self.versions = {"horovod": horovod.__version__}
        self.waits: Optional[List[float]] = None
        hvd.init()

    def wrap(self, model, optimizer, device_ids):
        hvd = self.hvd
        if not all(p.is_contiguous() for p in model.parameters()):
            raise RuntimeError(
                "Horovod allreduces contiguous tensors only, and this model's parameters (so "
                "their gradients) are not contiguous: channels_last keeps convolution weights "
                "in NHWC; run Horovod without channels_last")
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        return model, hvd.DistributedOptimizer(optimizer,
                                               named_parameters=model.named_parameters())

    def time_exposure(self, model) -> None:
        """Time every wait for the gradients from now on."""
        self.waits = []

    def exposed_s(self) -> float:
        """How long the steps since the last call waited for their gradients; cleared."""
        waits, self.waits = self.waits or [], []
        return sum(waits)

    @contextlib.contextmanager
    def gradients_reduced(self, optimizer):
        """Wait for the gradients' allreduces, then step without waiting again."""
        started = time.perf_counter()
        optimizer.synchronize()
        if self.waits is not None:
            self.waits.append(time.perf_counter() - started)
        with optimizer.skip_synchronize():
            yield

    def barrier(self) -> None:
        self.hvd.barrier()

    def max(self, value):
        return self.hvd.allreduce(value, op=self.hvd.Max)

    def sum_in_place(self, tensor) -> None:
        self.hvd.allreduce_(tensor, op=self.hvd.Sum)

    def size(self) -> int:
        return self.hvd.size()

    def finish(self) -> None:
        self.hvd.shutdown()


PARALLEL = {"none": NoParallel, "ddp": DdpParallel, "horovod": HorovodParallel}


def timed_allreduce(parallel: DdpParallel, bucket):
    """DDP's default allreduce of a bucket (the gradients averaged over the ranks), noting when
    the bucket was ready and when its allreduce finished."""
    ready = time.perf_counter()
    dist = parallel.dist
    tensor = bucket.buffer().div_(dist.get_world_size())

    def finished(future):
        parallel.bucket_times.append((ready, time.perf_counter()))
        return future.value()[0]

    return dist.all_reduce(tensor, async_op=True).get_future().then(finished)
