"""One TensorFlow process: ``python -m scaling.workers.tf_worker CELL_DIR``.

The cell's ``data_parallel`` picks the mechanism (``scaling.workers.tf_strategies``):
``mirrored`` drives N devices with MirroredStrategy; ``multiworker`` is one worker of a
MultiWorkerMirroredStrategy cluster described by TF_CONFIG; ``horovod`` is one Horovod rank on
one device. The step is a ``tf.function`` run through ``strategy.run``; warm-up covers tracing
and compilation. Steps are not waited for one by one: at chunk boundaries the last step's
results are materialized on the host, which waits for every step queued before it. Modes:
``forward`` runs the model with ``training=False`` and no tape; ``forward_backward`` computes
the gradients, aggregates them over the replicas as ``apply_gradients`` would, and applies
none. Each replica's synthetic batch is seeded by its cell-wide index; on real data
(``scaling.workers.tf_input``) the step takes the next batch of a distributed iterator inside
its tf.function, so that input and step are one call. Options: ``xla`` (``jit_compile``) and
``mixed_precision`` (the ``mixed_float16`` policy, with loss scaling).
"""

from __future__ import annotations

import functools
import os
from typing import Optional

from scaling.workers import common, tf_input, tf_profile
from scaling.workers.compute import compute_report, tensorflow_flops_per_image
from scaling.workers.loop import run_worker
from scaling.workers.tf_strategies import STRATEGIES


def configure_devices(tf, cell: dict, local_devices: int, first_gpu: int):
    """Create the logical devices (before TensorFlow initialises) and return their names: the
    ``local_devices`` GPUs from the machine's ``first_gpu`` on, or as many logical CPU devices."""
    tf.config.threading.set_intra_op_parallelism_threads(
        cell["threads_per_device"] * local_devices)
    # Under a memory cap, ops run one at a time so that the peak, and so OOM, is repeatable.
    tf.config.threading.set_inter_op_parallelism_threads(
        1 if cell["memory_limit"] else max(2, local_devices))
    if cell["device_type"] == "gpu":
        gpus = tf.config.list_physical_devices("GPU")[first_gpu:first_gpu + local_devices]
        tf.config.set_visible_devices(gpus, "GPU")
        return [f"/gpu:{index}" for index in range(len(gpus))]
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(local_devices)])
    return [f"/cpu:{index}" for index in range(local_devices)]


def cap_cpu_allocator(cell: dict, local_devices: int) -> None:
    """The CPU memory cap for TensorFlow, set before it is imported.

    Under an RLIMIT, TensorFlow aborts on std::bad_alloc instead of raising, and with oneDNN's
    allocator capped, oneDNN kernels can crash (SIGSEGV) when it runs out. TensorFlow's own BFC
    CPU allocator takes a limit and raises ResourceExhaustedError, as on a GPU, so a capped cell
    runs on it, without oneDNN. The process's logical devices share it: the limit is the cap
    times their number.
    """
    if cell["memory_limit"]:
        os.environ.update(
            TF_ENABLE_ONEDNN_OPTS="0", TF_CPU_ALLOCATOR_USE_BFC="true",
            TF_CPU_BFC_MEM_LIMIT_IN_MB=str(cell["memory_limit"] * local_devices // 2**20))


def refuse_unrunnable_options(cell: dict) -> None:
    if cell["options"].get("xla") and cell["options"].get("mixed_precision") \
            and cell["device_type"] == "cpu":
        raise RuntimeError(
            "xla and mixed_precision together do not run on CPU: XLA's CPU compiler refuses "
            "the mixed float16/float32 ops of mixed_float16 ('Seen floating point types of "
            "different precisions ... but mixed precision is disallowed'); use one of them")


def gpu_memory_totals(first_gpu: int, count: int) -> list:
    """Total memory of the machine's GPUs ``first_gpu`` on, in bytes; empty without NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return [pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(index)).total
                for index in range(first_gpu, first_gpu + count)]
    except Exception:  # no library, no driver, no such device: the capacity is unknown
        return []


def memory_report(tf, cell: dict, devices, first_gpu: int) -> dict:
    if cell["device_type"] != "gpu":
        peak_rss = common.peak_rss_bytes()
        if not cell["memory_limit"]:
            # Without a cap TensorFlow may use an allocator that keeps no statistics.
            return {"peak_memory_bytes": peak_rss, "capped_memory_peak_bytes": peak_rss,
                    "memory_capacity_bytes": None}
        return {"peak_memory_bytes": peak_rss,
                "capped_memory_peak_bytes": tf.config.experimental.get_memory_info("CPU:0")["peak"],
                "memory_capacity_bytes": int(os.environ["TF_CPU_BFC_MEM_LIMIT_IN_MB"]) * 2**20}
    peaks = [tf.config.experimental.get_memory_info(name.lstrip("/").upper())["peak"]
             for name in devices]
    totals = gpu_memory_totals(first_gpu, len(devices))
    return {"peak_memory_bytes": max(peaks), "capped_memory_peak_bytes": max(peaks),
            "memory_capacity_bytes": min(totals) if totals else None}


def loss_scaling(optimizer, mixed_precision: bool):
    """(scale the loss, unscale the gradients) for ``optimizer``.

    Keras 3 scales the loss with ``scale_loss`` and unscales in ``apply_gradients``; Keras 2
    (TensorFlow 2.15, which Horovod builds against) scales and unscales by hand."""
    if not mixed_precision:
        return (lambda loss: loss), (lambda grads: grads)
    if hasattr(optimizer, "scale_loss"):
        return optimizer.scale_loss, (lambda grads: grads)
    return optimizer.get_scaled_loss, optimizer.get_unscaled_gradients


class TensorFlowSession:
    """A Keras model under a tf.distribute strategy, stepping on the cell's real data or on one
    synthetic batch per replica."""

    def __init__(self, cell: dict, report: dict, rank: int = 0):
        self.cell, self.rank, self.mode = cell, rank, cell["mode"]
        cap_cpu_allocator(cell, cell["local_devices"])
        import tensorflow as tf

        self.tf = tf
        refuse_unrunnable_options(cell)
        self.parallel = STRATEGIES[cell["data_parallel"]](tf, cell)
        self.devices = configure_devices(tf, cell, cell["local_devices"],
                                         first_gpu=self.parallel.first_gpu)
        strategy = self.parallel.make_strategy(self.devices)
        import keras  # after the devices are configured: importing it initialises TensorFlow

        from workloads import get_workload

        workload = get_workload(cell["workload"])
        self._build_model(keras, strategy, workload)
        report.update(self._description(keras, strategy))
        self.gradient_bytes = sum(tf.as_dtype(v.dtype).size * int(tf.size(v))
                                  for v in self.model.trainable_variables)
        report.update(compute_report(
            cell, "fp16" if cell["options"].get("mixed_precision") else "fp32",
            lambda: tensorflow_flops_per_image(
                tf, lambda: workload.builder(cell["models"])(cell["image_size"],
                                                             workload.classes),
                workload, cell["image_size"], self.mode),
            self.gradient_bytes, devices_sharing=cell["local_devices"]))
        self.images_per_step = cell["batch_size"] * cell["local_devices"]
        self.strategy, self.workload, self.batches = strategy, workload, None
        if cell["data"]:
            self.batches = tf_input.distributed_batches(tf, strategy, cell, workload.channels)
            self._step = self._step_function(self.mode)
        else:
            self.use_synthetic()
        self._total, self._last = self.parallel.sum_function(strategy), None
        self._local_step = None

    def _build_model(self, keras, strategy, workload) -> None:
        """The model and its optimizer under ``strategy``'s scope, the same on every process."""
        mixed_precision = bool(self.cell["options"].get("mixed_precision"))
        if mixed_precision:
            keras.mixed_precision.set_global_policy("mixed_float16")
        with strategy.scope():
            self.model = workload.builder(self.cell["models"])(self.cell["image_size"],
                                                               workload.classes)
            optimizer = (keras.optimizers.Adam(learning_rate=0.001)
                         if workload.optimizer == "adam"
                         else keras.optimizers.SGD(learning_rate=0.01, momentum=0.9))
            if mixed_precision:
                optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)
        self.optimizer = optimizer
        self.scale_loss, self.unscale = loss_scaling(optimizer, mixed_precision)
        self.parallel.broadcast(self.model.variables)
        self.loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                  reduction="none")
        self.global_batch = self.cell["batch_size"] * strategy.num_replicas_in_sync

    def _description(self, keras, strategy) -> dict:
        """What the rank report says about the model, its devices and its software."""
        tf, cell = self.tf, self.cell
        build = tf.sysconfig.get_build_info()
        return dict(
            params=sum(int(tf.size(v)) for v in self.model.trainable_variables),
            versions={"tensorflow": tf.__version__, "keras": keras.__version__,
                      **self.parallel.versions(),
                      **{k: v for k, v in build.items() if k in ("cuda_version", "cudnn_version")}},
            device_name=self.devices[0] if cell["device_type"] == "cpu"
            else tf.config.experimental.get_device_details(
                tf.config.list_physical_devices("GPU")[self.parallel.first_gpu]
            ).get("device_name", "gpu"),
            layout="NHWC", local_devices=cell["local_devices"],
            replicas=self.parallel.replicas(strategy),
            threads="one intra-op pool of threads_per_device x local devices, shared by the "
                    "process's logical devices",
            xla=bool(cell["options"].get("xla")),
            mixed_precision=bool(cell["options"].get("mixed_precision")),
        )

    def use_synthetic(self) -> None:
        """From now on, every step trains on one synthetic batch per replica, made once and
        seeded by the replica's index."""
        tf, size, batch = self.tf, self.cell["image_size"], self.cell["batch_size"]
        workload = self.workload

        def synthetic(context):
            seed = [self.parallel.replica_index(context), 0]
            images = tf.random.stateless_uniform([batch, size, size, workload.channels], seed)
            labels = tf.random.stateless_uniform([batch], seed, minval=0,
                                                 maxval=workload.classes, dtype=tf.int32)
            return images, labels

        self.images, self.labels = \
            self.strategy.experimental_distribute_values_from_function(synthetic)
        self.batches = None
        self._step = self._step_function(self.mode)

    def loader_alone(self):
        """A fresh pipeline of this process's shard, with the same workers: each batch's image
        count, without end."""
        return tf_input.image_counts(self.tf, self.cell, self.workload.channels)

    def _step_function(self, mode: str):
        """One step in ``mode`` over every replica of the process, on the next batches of
        ``self.batches`` or else on the synthetic ones; it returns each replica's result (its
        loss, or in forward_backward the sum of the aggregated gradients)."""
        tf, strategy = self.tf, self.strategy
        replica_step = tf.function(lambda images, labels: self._replica_step(mode, images, labels),
                                   jit_compile=bool(self.cell["options"].get("xla")))

        def run(images, labels):
            return strategy.experimental_local_results(
                strategy.run(replica_step, args=(images, labels)))

        if self.batches is None:
            return tf.function(lambda: run(self.images, self.labels))
        step = tf.function(lambda batches: run(*next(batches)))
        return lambda: step(self.batches)

    def _replica_step(self, mode: str, images, labels):
        tf, model = self.tf, self.model
        if mode == "forward":
            return tf.reduce_sum(tf.cast(model(images, training=False), tf.float32))
        loss, grads = self._gradients(images, labels, self.parallel.gradient_tape)
        if mode == "train":
            self.optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        # Returned, so that the aggregated gradients are computed rather than pruned.
        return tf.add_n([tf.reduce_sum(tf.cast(grad, tf.float32))
                         for grad in self.parallel.aggregate(grads)])

    def _gradients(self, images, labels, wrap_tape):
        """The replica's loss and gradients, through the tape ``wrap_tape`` returns."""
        tf, model = self.tf, self.model
        with tf.GradientTape() as tape:
            logits = tf.cast(model(images, training=True), tf.float32)
            loss = tf.nn.compute_average_loss(self.loss_fn(labels, logits),
                                              global_batch_size=self.global_batch)
            scaled = self.scale_loss(loss)
        return loss, self.unscale(wrap_tape(tape).gradient(scaled, model.trainable_variables))

    def local_steps(self, count: int) -> None:
        """``count`` forward and backward passes on every replica of the process, with no
        gradient aggregated (the tape is not the mechanism's) and no update."""
        tf, strategy = self.tf, self.strategy
        if self._local_step is None:
            @functools.partial(tf.function, jit_compile=bool(self.cell["options"].get("xla")))
            def replica(images, labels):
                grads = self._gradients(images, labels, lambda tape: tape)[1]
                return tf.add_n([tf.reduce_sum(tf.cast(grad, tf.float32)) for grad in grads])

            self._local_step = tf.function(lambda: strategy.experimental_local_results(
                strategy.run(replica, args=(self.images, self.labels))))
        for _ in range(count):
            results = self._local_step()
        for result in results:
            result.numpy()

    def step(self) -> None:
        self._last = self._step()

    def synchronize(self) -> None:
        for result in self._last or ():
            result.numpy()

    def barrier(self) -> None:
        self._total(self.tf.constant(1.0)).numpy()

    def agree_max(self, value: int) -> int:
        return self.parallel.maximum(self.strategy, value)

    def collective(self) -> TensorFlowCollective:
        """The allreduce of the strategy that aggregates this session's gradients."""
        return TensorFlowCollective(self.tf, self.parallel, self.strategy)

    def _run(self, steps: int) -> None:
        for _ in range(steps):
            self.step()
        self.synchronize()

    def profile(self, steps: int, path: str) -> Optional[bool]:
        """The Chrome trace of ``steps`` steps under TensorFlow's profiler (``tf_profile``).
        Rank 0 only (None elsewhere)."""
        if self.rank > 0:
            # A second profiling worker of one MultiWorkerMirroredStrategy cluster dies
            # ("free(): invalid pointer"), so only rank 0 profiles; the others step along.
            self._run(steps)
            return None
        tf_profile.profile(self.tf, lambda: self._run(steps), path)
        return self.cell["device_type"] == "gpu"

    def finish(self) -> dict:
        report = memory_report(self.tf, self.cell, self.devices, self.parallel.first_gpu)
        local = self.strategy.experimental_local_results
        report["data_sums"] = [float(self.tf.reduce_sum(images)) for images in local(self.images)]
        if self.mode != "forward":
            # The last step's in forward_backward; after train, one more untimed such step.
            sums = self._last if self.mode == "forward_backward" \
                else self._step_function("forward_backward")()
            report["gradient_sums"] = [float(value) for value in sums]
        return report


class TensorFlowCollective:
    """The allreduce of a strategy (``scaling.workers.collective``): the replica context's
    ``all_reduce`` under mirrored and multiworker (their cross-device ops), Horovod's allreduce
    under horovod; one buffer per replica of this process."""

    def __init__(self, tf, parallel, strategy):
        self.tf, self.strategy = tf, strategy
        self.devices = parallel.replicas(strategy)
        self._sum = parallel.allreduce_function(strategy)
        self._total = parallel.sum_function(strategy)
        self.values = None

    def _fill(self, count: int, value: float) -> None:
        tf = self.tf
        self.values = self.strategy.experimental_distribute_values_from_function(
            lambda context: tf.fill([count], tf.constant(value, tf.float32)))

    def prepare(self, count: int) -> None:
        self._fill(count, 1.0)

    def zero(self) -> None:
        self._fill(int(self._local()[0].shape[0]), 0.0)

    def _local(self):
        return self.strategy.experimental_local_results(self.values)

    def allreduce(self) -> None:
        self.values = self._sum(self.values)

    def first_value(self) -> float:
        return float(self._local()[0][0].numpy())

    def synchronize(self) -> None:
        for value in self._local():
            value[0].numpy()

    def barrier(self) -> None:
        self._total(self.tf.constant(1.0)).numpy()

    def finish(self) -> dict:
        return {}


def build(cell: dict, report: dict, rank: int) -> TensorFlowSession:
    return TensorFlowSession(cell, report, rank)


def collective(cell: dict, report: dict, rank: int) -> TensorFlowCollective:
    """The collective alone, for a cell of purpose ``allreduce``."""
    import tensorflow as tf

    parallel = STRATEGIES[cell["data_parallel"]](tf, cell)
    devices = configure_devices(tf, cell, cell["local_devices"], first_gpu=parallel.first_gpu)
    report.update(versions={"tensorflow": tf.__version__, **parallel.versions()},
                  device_name=devices[0], local_devices=cell["local_devices"])
    return TensorFlowCollective(tf, parallel, parallel.make_strategy(devices))


if __name__ == "__main__":
    # The cap is TensorFlow's own allocator limit (cap_cpu_allocator), not an RLIMIT.
    run_worker(build, cap_heap=False, collective=collective)
