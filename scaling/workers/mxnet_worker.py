"""One MXNet process driving N contexts: ``python -m scaling.workers.mxnet_worker CELL_DIR``.

Runs under MXNet's own interpreter, so it imports only the standard library, MXNet and the
workload definitions. On synthetic data each context holds one batch of its own, seeded by its
cell-wide replica index; on real data (``scaling.workers.mxnet_input``) a step takes the
loader's next process batch and splits it over the contexts with ``split_and_load``. MXNet's
engine is asynchronous: steps are queued, and ``mx.nd.waitall()`` at chunk boundaries waits for
them; errors raised inside the engine surface there, inside the report. The cell's
``data_parallel`` picks the mechanism: ``kvstore`` (one process over all contexts, a kvstore
Trainer) or ``horovod`` (one Horovod rank per context, ``hvd.DistributedTrainer`` after a
broadcast of the parameters). Option ``amp``: ``mxnet.contrib.amp`` with
float16 on GPU and bfloat16 on CPU, with a dynamic loss scale. Modes: ``forward`` runs the
network outside ``autograd.record``; ``forward_backward`` computes gradients and aggregates them
(``allreduce_grads``, whose kvstore then keeps no optimizer) without an update.
"""

from __future__ import annotations

import numpy

from scaling.workers import common, mxnet_flops, mxnet_input
from scaling.workers.compute import compute_report
from scaling.workers.loop import run_worker


def cpu_has_bf16() -> bool:
    with open("/proc/cpuinfo") as cpuinfo:
        flags = next((line.split(":", 1)[1].split() for line in cpuinfo
                      if line.startswith("flags")), [])
    return "avx512_bf16" in flags or "amx_bf16" in flags


class KvstoreParallel:
    """One process over all of its contexts; a kvstore Trainer aggregates their gradients."""

    first_gpu = first_replica = 0
    versions: dict = {}

    def __init__(self, cell: dict):
        self.kvstore = cell["options"].get("kvstore",
                                           "device" if cell["device_type"] == "gpu" else "local")
        self.update_on_kvstore = False if cell["mode"] == "forward_backward" else None

    def trainer(self, gluon, params, optimizer: str, optimizer_params: dict):
        """A trainer over ``params``; in forward_backward the kvstore only aggregates (MXNet
        picks where train updates)."""
        return gluon.Trainer(params, optimizer, optimizer_params, kvstore=self.kvstore,
                             update_on_kvstore=self.update_on_kvstore)

    def total(self, mx, value: float) -> float:
        """The sum of ``value`` over the cell's processes: this one holds every context."""
        return value

    def maximum(self, mx, value: int) -> int:
        """The largest ``value`` of the cell's processes: this one's."""
        return value

    def summer(self, mx, arrays):
        """A function that sums ``arrays`` (one per context) in place over the cell: a
        ``pushpull`` through a kvstore of the cell's kind, under a key of their own."""
        store = mx.kv.create(self.kvstore)
        store.init(0, arrays[0])
        return lambda: store.pushpull(0, arrays, out=arrays)


class NoParallel(KvstoreParallel):
    """One process on one context with no kvstore: the ``single`` baseline."""

    def __init__(self, cell: dict):
        self.kvstore = self.update_on_kvstore = None


class HorovodParallel:
    """One Horovod rank on one context: ``hvd.DistributedTrainer`` allreduces the gradients."""

    kvstore = None

    def __init__(self, cell: dict):
        import horovod
        import horovod.mxnet as hvd

        self.hvd, self.versions = hvd, {"horovod": horovod.__version__}
        hvd.init()
        self.first_gpu, self.first_replica = hvd.local_rank(), hvd.rank()

    def trainer(self, gluon, params, optimizer: str, optimizer_params: dict):
        """A trainer over ``params``, broadcast from rank 0 (they are initialized at the first
        forward; the broadcast follows then)."""
        self.hvd.broadcast_parameters(params, root_rank=0)
        return self.hvd.DistributedTrainer(params, optimizer, optimizer_params)

    def total(self, mx, value: float) -> float:
        """The sum of ``value`` over the Horovod ranks."""
        return float(self.hvd.allreduce(mx.nd.array([value]), op=self.hvd.Sum).asscalar())

    def maximum(self, mx, value: int) -> int:
        """The largest ``value`` of the Horovod ranks."""
        return int(self.hvd.allreduce(mx.nd.array([value]), op=self.hvd.Max).asscalar())

    def summer(self, mx, arrays):
        """A function that sums this rank's one array in place over the Horovod ranks."""
        [array] = arrays
        return lambda: self.hvd.allreduce_(array, op=self.hvd.Sum)


PARALLEL = {"none": NoParallel, "kvstore": KvstoreParallel, "horovod": HorovodParallel}


def init_amp(cell: dict):
    """``mxnet.contrib.amp`` initialised for the cell's device, or None without ``amp``."""
    if not cell["options"].get("amp"):
        return None
    gpu = cell["device_type"] == "gpu"
    if not gpu and not cpu_has_bf16():
        raise RuntimeError("MXNet amp on CPU runs bfloat16 oneDNN kernels, which need a "
                           "CPU with AVX512-BF16 or AMX-BF16; this one has neither")
    from mxnet.contrib import amp

    amp.init(target_dtype="float16" if gpu else "bfloat16")
    return amp


class MxnetSession:
    """A hybridized Gluon model over this process's contexts, with a data-parallel Trainer."""

    def __init__(self, cell: dict, report: dict):
        import mxnet as mx
        from mxnet import autograd, gluon

        from workloads import get_workload

        self.mx, self.autograd = mx, autograd
        self.mode = cell["mode"]
        self.gpu = cell["device_type"] == "gpu"
        self.amp = init_amp(cell)
        self.parallel = PARALLEL[cell["data_parallel"]](cell)
        first = self.parallel.first_gpu
        self.contexts = [mx.gpu(first + index) if self.gpu else mx.cpu(index)
                         for index in range(cell["local_devices"])]
        workload = get_workload(cell["workload"])
        self.images_per_step = cell["batch_size"] * len(self.contexts)
        self._build_model(gluon, cell, workload)
        self.cell, self.workload, self.batches = cell, workload, None
        if cell["data"]:
            self.batches = mxnet_input.context_batches(self._loader(), self.contexts)
        else:
            self.use_synthetic()
        report.update(
            versions={"mxnet": mx.__version__, "cuda": mx.runtime.Features().is_enabled("CUDA"),
                      **self.parallel.versions},
            device_name=str(self.contexts[0]), layout="NCHW", hybridized=True,
            kvstore=self.parallel.kvstore, contexts=len(self.contexts),
        )

    def _build_model(self, gluon, cell: dict, workload) -> None:
        """The hybridized network on every context, and its data-parallel trainer."""
        self.net = workload.builder(cell["models"])(cell["image_size"], workload.classes)
        self.net.initialize(self.mx.init.Xavier(), ctx=self.contexts)
        self.net.hybridize(static_alloc=True, static_shape=True)
        optimizer_params = ({"learning_rate": 0.001} if workload.optimizer == "adam"
                            else {"learning_rate": 0.01, "momentum": 0.9})
        self.trainer = self.parallel.trainer(gluon, self.net.collect_params(),
                                             workload.optimizer, optimizer_params)
        if self.amp:
            self.amp.init_trainer(self.trainer)
        self.loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def _make_batch(self, batch: int, size: int, workload) -> None:
        """One synthetic batch per context, seeded by its cell-wide replica index."""
        mx, self.images, self.labels = self.mx, [], []
        for index, context in enumerate(self.contexts, start=self.parallel.first_replica):
            mx.random.seed(index, ctx=context)
            self.images.append(mx.nd.random.uniform(
                shape=(batch, workload.channels, size, size), ctx=context))
            self.labels.append(mx.nd.random.randint(
                0, workload.classes, shape=(batch,), ctx=context).astype("float32"))

    def _loader(self):
        """A fresh loader of this process's shard, a batch for each of its contexts."""
        return mxnet_input.data_loader(self.cell, self.workload.channels, len(self.contexts),
                                       self.parallel.first_gpu)

    def use_synthetic(self) -> None:
        """From now on, every step trains on one synthetic batch per context."""
        self._make_batch(self.cell["batch_size"], self.cell["image_size"], self.workload)
        self.batches = None

    def loader_alone(self):
        """A fresh loader of this process's shard, with the same workers: each batch's image
        count, without end."""
        return mxnet_input.image_counts(self._loader())

    def step(self) -> None:
        images, labels = next(self.batches) if self.batches else (self.images, self.labels)
        if self.mode == "forward":
            for x in images:
                self.net(x)
            return
        with self.autograd.record():
            losses = [self.loss_fn(self.net(x), y) for x, y in zip(images, labels)]
            if self.amp:
                with self.amp.scale_loss(losses, self.trainer) as scaled:
                    losses = scaled
        self.autograd.backward(losses)
        if self.mode == "train":
            self.trainer.step(self.images_per_step)
        else:
            self.trainer.allreduce_grads()

    def synchronize(self) -> None:
        self.mx.nd.waitall()

    def barrier(self) -> None:
        """Under Horovod, a collective every rank joins; one kvstore process holds every
        context, so there is no other rank to wait for."""
        self.parallel.total(self.mx, 1.0)

    def agree_max(self, value: int) -> int:
        return int(self.parallel.maximum(self.mx, value))

    def profile(self, steps: int, path: str) -> bool:
        profiler = self.mx.profiler
        profiler.set_config(profile_all=True, filename=path, aggregate_stats=False)
        profiler.set_state("run")
        for _ in range(steps):
            self.step()
        self.synchronize()
        profiler.set_state("stop")
        profiler.dump()
        return self.gpu

    def fingerprints(self) -> dict:
        """Per context, the sum of its batch's images and, after a backward pass, of its
        gradients: aggregated in forward_backward, and in train where the contexts, not a
        kvstore, update."""
        sums = {"data_sums": [float(x.sum().asscalar()) for x in self.images]}
        if self.mode != "forward":
            trained = [p for p in self.net.collect_params().values() if p.grad_req != "null"]
            sums["gradient_sums"] = [sum(float(p.grad(context).sum().asscalar())
                                         for p in trained) for context in self.contexts]
        return sums

    @property
    def gradient_bytes(self) -> int:
        """The bytes of one context's gradients (the parameters exist after the first step)."""
        trained = [p.data(self.contexts[0]) for p in self.net.collect_params().values()
                   if p.grad_req != "null"]
        return sum(data.size * numpy.dtype(data.dtype).itemsize for data in trained)

    def collective(self) -> MxnetCollective:
        """The allreduce of the mechanism that aggregates this session's gradients."""
        return MxnetCollective(self.mx, self.parallel, self.contexts)

    def compute_facts(self, cell: dict) -> dict:
        """FLOPs per image (counted on the network's symbol graph, as MXNet has no counter of
        its own: ``scaling.workers.mxnet_flops``), gradient bytes and precision; no matrix
        kernel for the ceiling."""
        precision = ("fp16" if self.gpu else "bf16") if self.amp else "fp32"
        size = cell["image_size"]
        return compute_report(
            cell, precision,
            lambda: mxnet_flops.flops_per_image(self.mx, self.net,
                                                (self.workload.channels, size, size), self.mode),
            self.gradient_bytes)

    def finish(self) -> dict:
        params = sum(p.data(self.contexts[0]).size for p in self.net.collect_params().values()
                     if p.grad_req != "null")
        facts = {"params": params, **self.compute_facts(self.cell), **self.fingerprints()}
        if not self.gpu:
            return {"peak_memory_bytes": common.peak_rss_bytes(),
                    **common.cpu_memory_headroom(), **facts}
        # The pooled GPU allocator keeps what it has allocated, so use at the end is the peak.
        info = [self.mx.context.gpu_memory_info(context.device_id) for context in self.contexts]
        used = max(total - free for free, total in info)
        return {"peak_memory_bytes": used, "capped_memory_peak_bytes": used,
                "memory_capacity_bytes": min(total for _, total in info), **facts}


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
        return {}


def build(cell: dict, report: dict, rank: int) -> MxnetSession:
    return MxnetSession(cell, report)


def collective(cell: dict, report: dict, rank: int) -> MxnetCollective:
    """The collective alone, for a cell of purpose ``allreduce``."""
    import mxnet as mx

    parallel = PARALLEL[cell["data_parallel"]](cell)
    gpu = cell["device_type"] == "gpu"
    contexts = [mx.gpu(parallel.first_gpu + index) if gpu else mx.cpu(index)
                for index in range(cell["local_devices"])]
    report.update(versions={"mxnet": mx.__version__, **parallel.versions},
                  device_name=str(contexts[0]), kvstore=parallel.kvstore)
    return MxnetCollective(mx, parallel, contexts)


if __name__ == "__main__":
    run_worker(build, collective=collective)
