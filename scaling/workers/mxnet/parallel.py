"""How one MXNet process is data-parallel: a class per value of the cell's ``data_parallel``
(``none``, ``kvstore``, ``horovod``): its trainer, the sum and maximum of a value over the
cell's processes, and an in-place sum of one array per context for the collective."""

from __future__ import annotations

import os

BIGARRAY_BOUND_ENV, BIGARRAY_BOUND_DEFAULT = "MXNET_KVSTORE_BIGARRAY_BOUND", 1000 * 1000
"""The size (elements) from which a kvstore splits an array to reduce it, and MXNet's default."""


class KvstoreParallel:
    """One process over all of its contexts; a kvstore Trainer aggregates their gradients, with
    the options ``kvstore`` and ``bigarray_bound``."""

    first_gpu = first_replica = 0
    versions: dict = {}

    def __init__(self, cell: dict):
        options, gpu = cell["options"], cell["device_type"] == "gpu"
        self.kvstore = options.get("kvstore", "device" if gpu else "local")
        if self.kvstore == "nccl" and not gpu:
            raise RuntimeError("kvstore nccl does not run on CPU: NCCL reduces over GPUs only "
                               "(and MXNet refuses it without a USE_NCCL=1 build); use local "
                               "or device")
        self.update_on_kvstore = False if cell["mode"] == "forward_backward" else None

    def communication_in_effect(self, trainer) -> dict:
        """The type of the Trainer's kvstore (None before a step made one: in ``forward``), and
        the big-array bound as this process's environment gives it to the kvstore (MXNet has no
        getter for it)."""
        store = trainer._kvstore if trainer._kv_initialized else None  # noqa: SLF001
        return {"kvstore": store.type if store else None,
                "bigarray_bound": int(os.environ.get(BIGARRAY_BOUND_ENV,
                                                     BIGARRAY_BOUND_DEFAULT))}

    def trainer(self, gluon, params, optimizer: str, optimizer_params: dict):
        """A trainer over ``params``; in forward_backward the kvstore only aggregates (MXNet
        picks where train updates)."""
        return gluon.Trainer(params, optimizer, optimizer_params, kvstore=self.kvstore,
                             update_on_kvstore=self.update_on_kvstore)

    def finish(self) -> None:
        """No collective to take down: the kvstore goes with the process."""

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

    def communication_in_effect(self, trainer) -> dict:
        return {}


class HorovodParallel:
    """One Horovod rank on one context: ``hvd.DistributedTrainer`` allreduces the gradients."""

    kvstore = None

    def __init__(self, cell: dict):
        import horovod
        import horovod.mxnet as hvd

        from scaling.workers.horovod_knobs import init_horovod

        self.hvd, self.versions = hvd, {"horovod": horovod.__version__}
        self.compression, self.settings = init_horovod(hvd, cell["options"])
        self.first_gpu, self.first_replica = hvd.local_rank(), hvd.rank()

    def trainer(self, gluon, params, optimizer: str, optimizer_params: dict):
        """A trainer over ``params``, broadcast from rank 0 (they are initialized at the first
        forward; the broadcast follows then), compressing the gradients as the option
        ``compression`` says."""
        self.hvd.broadcast_parameters(params, root_rank=0)
        return self.hvd.DistributedTrainer(params, optimizer, optimizer_params,
                                           compression=self.compression)

    def communication_in_effect(self, trainer) -> dict:
        """The fusion threshold and cycle time that ``hvd.init`` read, and the compression
        that the DistributedTrainer holds."""
        from scaling.workers.horovod_knobs import horovod_in_effect

        return horovod_in_effect(self.settings, getattr(trainer, "_compression", None))

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

    def finish(self) -> None:
        """Every rank leaves Horovod together: a rank that exited with its background loop
        still running would reset the other ranks' connections, and fail a peer not yet done
        with the last collective."""
        self.hvd.shutdown()


PARALLEL = {"none": NoParallel, "kvstore": KvstoreParallel, "horovod": HorovodParallel}
