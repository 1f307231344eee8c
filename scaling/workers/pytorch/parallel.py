"""How one PyTorch process is data-parallel: a class per value of the cell's ``data_parallel``
(``none``, ``ddp``, ``horovod``): wrapping the model and optimizer, waiting for the gradients,
barriers, a maximum and a sum over the ranks, and leaving.

On CPU with ``profile`` on, the mechanism times the communication that the profiler's trace
cannot see (gloo's work runs outside it), ``time_exposure``: under ``ddp`` a communication hook
times each gradient bucket's allreduce, and a step's exposed communication is how long the last
allreduce ran on after the last bucket was ready, which the backward pass had to wait for;
under ``horovod`` it is how long the step waited in ``synchronize`` for the allreduces that
Horovod's background thread had not finished when the backward pass ended.

The launcher's communication options (the cell's ``options``) reach the wrapper: under ``ddp``
DistributedDataParallel's ``bucket_cap_mb``, ``gradient_as_bucket_view``, ``static_graph``,
``broadcast_buffers`` and a ``comm_hook`` that compresses each bucket to fp16 or bf16; under
``horovod`` the ``compression`` of its DistributedOptimizer (its fusion threshold and cycle time
are environment variables that ``hvd.init`` reads). ``in_effect`` reads back what the wrapped
model and optimizer hold, for the rank report's ``communication_in_effect``.
"""

from __future__ import annotations

import contextlib
import time
from typing import Dict, List, Optional, Tuple

from scaling.workers.horovod_knobs import horovod_in_effect, init_horovod


class NoParallel:
    """One process on one device with no data-parallel wrapper: the ``single`` baseline."""

    versions: dict = {}

    def __init__(self, is_gpu: bool, options: Optional[Dict] = None):
        pass

    def configure(self, options: Optional[Dict]) -> None:
        """No options."""

    def wrap(self, model, optimizer, device_ids):
        return model, optimizer

    def in_effect(self, model, optimizer) -> Dict:
        """No communication to tune."""
        return {}

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

    def __init__(self, is_gpu: bool, options: Optional[Dict] = None):
        import torch.distributed as dist

        self.dist = dist
        self.versions = {}
        self.configure(options)
        dist.init_process_group(backend="nccl" if is_gpu else "gloo")

    def configure(self, options: Optional[Dict]) -> None:
        """Take a cell's options (the next cell's, in a shared tree)."""
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        self.options = options or {}
        self.bucket_times: Optional[List[Tuple[float, float]]] = None
        self.hook = {"none": default_hooks.allreduce_hook,
                     "fp16": default_hooks.fp16_compress_hook,
                     "bf16": default_hooks.bf16_compress_hook}[self.options.get("comm_hook",
                                                                                "none")]

    def wrap(self, model, optimizer, device_ids):
        """DistributedDataParallel with the cell's knobs; DDP's defaults for those it leaves
        unset (``broadcast_buffers`` is passed only to turn it off: torch deprecates it)."""
        from torch.nn.parallel import DistributedDataParallel

        knobs = {key: self.options[key] for key in ("bucket_cap_mb", "gradient_as_bucket_view",
                                                    "static_graph") if key in self.options}
        if self.options.get("broadcast_buffers") is False:
            knobs["broadcast_buffers"] = False
        ddp = DistributedDataParallel(model, device_ids=device_ids, **knobs)
        if self.options.get("comm_hook", "none") != "none":
            ddp.register_comm_hook(self, reduce_bucket)
        return ddp, optimizer

    def in_effect(self, ddp, optimizer) -> Dict:
        """The knobs as the DDP model holds them: its bucket cap (MiB), flags, and the torch
        hook that its registered communication hook runs (``none``: DDP's own allreduce); nothing
        in forward mode, which runs no DDP."""
        if not hasattr(ddp, "bucket_bytes_cap"):
            return {}  # forward mode: the model is not wrapped
        hooks = getattr(ddp, "_comm_hooks", [])
        return {"bucket_cap_mb": ddp.bucket_bytes_cap / 2**20,
                "gradient_as_bucket_view": bool(ddp.gradient_as_bucket_view),
                "static_graph": bool(ddp.static_graph),
                "broadcast_buffers": bool(ddp.broadcast_buffers),
                "comm_hook": hooks[0][1].hook.__name__ if hooks else "none"}

    def time_exposure(self, model) -> None:
        """Time every bucket's allreduce from now on (:func:`reduce_bucket`)."""
        self.bucket_times = []
        if not getattr(model, "_comm_hooks", []):
            model.register_comm_hook(self, reduce_bucket)

    def exposed_s(self) -> float:
        """How long the allreduces timed since the last call ran on after the last bucket was
        ready; the times are cleared."""
        times, self.bucket_times = self.bucket_times or [], []
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

    def __init__(self, is_gpu: bool, options: Optional[Dict] = None):
        """NCCL on GPU where the build has it, gloo otherwise: Horovod picks at build time."""
        import horovod
        import horovod.torch as hvd

        self.hvd = hvd
        self.versions = {"horovod": horovod.__version__}
        self.waits: Optional[List[float]] = None
        self.compression, self.settings = init_horovod(hvd, options or {})

    def wrap(self, model, optimizer, device_ids):
        hvd = self.hvd
        if not all(p.is_contiguous() for p in model.parameters()):
            raise RuntimeError(
                "Horovod allreduces contiguous tensors only, and this model's parameters (so "
                "their gradients) are not contiguous: channels_last keeps convolution weights "
                "in NHWC; run Horovod without channels_last")
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        return model, hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                               compression=self.compression)

    def in_effect(self, model, optimizer) -> Dict:
        """The fusion threshold and cycle time that ``hvd.init`` read, and the compression
        that the DistributedOptimizer holds (none in forward mode, which has no optimizer)."""
        return horovod_in_effect(self.settings, getattr(optimizer, "_compression", None))

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
SHARED = ("none", "ddp")
"""The mechanisms whose process may run several cells (``scaling.workers.tree``): one set up
by the first cell serves the next ones, with their own options."""
_KEPT: Dict[str, object] = {}


def mechanism(cell: Dict, is_gpu: bool):
    """The cell's data-parallel mechanism: a new one, or in a shared tree the process's own,
    set up by its first cell and kept for the others (``finish`` leaves it up)."""
    kind, options = cell["data_parallel"], cell["options"]
    if not cell.get("shared_tree"):
        return PARALLEL[kind](is_gpu, options)
    if kind not in _KEPT:
        _KEPT[kind] = PARALLEL[kind](is_gpu, options)
    _KEPT[kind].configure(options)
    return _KEPT[kind]


def reduce_bucket(parallel: DdpParallel, bucket):
    """DDP's communication hook of the cell: torch's hook of its ``comm_hook`` (the averaging
    allreduce, or that of the bucket compressed to fp16 or bf16), noting, once ``time_exposure``
    has begun, when the bucket was ready and when its allreduce finished."""
    ready = time.perf_counter()
    future = parallel.hook(None, bucket)
    if parallel.bucket_times is None:
        return future

    def finished(done):
        parallel.bucket_times.append((ready, time.perf_counter()))
        return done.value()

    return future.then(finished)
