"""One TensorFlow process: ``python -m scaling.workers.tf_worker CELL_DIR``.

The cell's ``data_parallel`` picks the mechanism: ``mirrored`` drives N devices with
MirroredStrategy; ``multiworker`` is one worker of a MultiWorkerMirroredStrategy cluster
described by TF_CONFIG; ``horovod`` is one Horovod rank on one device, under the default
strategy, with ``hvd.DistributedGradientTape`` and the variables broadcast from rank 0 (for
TensorFlow 2.15, which Horovod 0.28.1 builds against). The step is a ``tf.function`` run through
``strategy.run``; warm-up covers tracing and compilation. Steps are
not waited for one by one: at chunk boundaries the last step's loss is materialized on the
host, which waits for every step queued before it. Modes: ``forward`` runs
the model with ``training=False`` and no tape; ``forward_backward`` computes the gradients and
applies none.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Optional

from scaling.workers import common
from scaling.workers.loop import run_worker

TF_OPERATION = re.compile(r"^[^\s:]+:[A-Za-z_]\w*$")
"""A TensorFlow operation in the profiler's host plane: ``scope/name:Type``."""


def configure_devices(tf, cell: dict, local_devices: int, first_gpu: int = 0):
    """Create the logical devices (before TensorFlow initialises) and return their names."""
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


def make_strategy(tf, cell: dict, devices):
    if cell["data_parallel"] == "horovod":
        return tf.distribute.get_strategy()
    if cell["data_parallel"] == "mirrored":
        reduce_ops = (tf.distribute.NcclAllReduce() if cell["device_type"] == "gpu"
                      else tf.distribute.ReductionToOneDevice(reduce_to_device="/cpu:0"))
        return tf.distribute.MirroredStrategy(devices=devices, cross_device_ops=reduce_ops)
    implementation = (tf.distribute.experimental.CommunicationImplementation.NCCL
                      if cell["device_type"] == "gpu"
                      else tf.distribute.experimental.CommunicationImplementation.RING)
    return tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=implementation))


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


def memory_report(tf, cell: dict, devices) -> dict:
    if cell["device_type"] != "gpu":
        peak_rss = common.peak_rss_bytes()
        if not cell["memory_limit"]:
            # Without a cap TensorFlow may use an allocator that keeps no statistics.
            return {"peak_memory_bytes": peak_rss, "capped_memory_peak_bytes": peak_rss,
                    "memory_capacity_bytes": None}
        return {"peak_memory_bytes": peak_rss,
                "capped_memory_peak_bytes": tf.config.experimental.get_memory_info("CPU:0")["peak"],
                "memory_capacity_bytes": int(os.environ["TF_CPU_BFC_MEM_LIMIT_IN_MB"]) * 2**20}
    from scaling.hardware import query_gpus

    peaks = [tf.config.experimental.get_memory_info(name.lstrip("/").upper())["peak"]
             for name in devices]
    totals = [int(gpu["memory_total_mib"]) * 2**20 for gpu in query_gpus()[:len(devices)]]
    return {"peak_memory_bytes": max(peaks), "capped_memory_peak_bytes": max(peaks),
            "memory_capacity_bytes": min(totals) if totals else None}



class TensorFlowSession:
    """A Keras model under a tf.distribute strategy, with one synthetic batch per replica."""

    def __init__(self, cell: dict, report: dict, rank: int = 0):
        self.cell, self.rank = cell, rank
        local_devices = cell["local_devices"]
        cap_cpu_allocator(cell, local_devices)
        import tensorflow as tf

        self.tf = tf
        options = cell["options"]
        if options.get("xla") and options.get("mixed_precision") and cell["device_type"] == "cpu":
            raise RuntimeError(
                "xla and mixed_precision together do not run on CPU: XLA's CPU compiler refuses "
                "the mixed float16/float32 ops of mixed_float16 ('Seen floating point types of "
                "different precisions ... but mixed precision is disallowed'); use one of them")
        hvd = None
        if cell["data_parallel"] == "horovod":
            if options.get("xla"):
                raise RuntimeError(
                    "xla does not run under Horovod: its allreduce inside the jit-compiled step "
                    "has no XLA kernel in this build; run horovod without xla")
            import horovod.tensorflow as hvd

            hvd.init()
        self.devices = configure_devices(tf, cell, local_devices,
                                         first_gpu=hvd.local_rank() if hvd else 0)
        strategy = make_strategy(tf, cell, self.devices)

        import keras  # after the devices are configured: importing it initialises TensorFlow

        from workloads import get_workload

        if options.get("mixed_precision"):
            keras.mixed_precision.set_global_policy("mixed_float16")
        workload = get_workload(cell["workload"])
        size, batch = cell["image_size"], cell["batch_size"]
        global_batch = batch * strategy.num_replicas_in_sync
        with strategy.scope():
            model = workload.builder(cell["models"])(size, workload.classes)
            optimizer = (keras.optimizers.Adam(learning_rate=0.001)
                         if workload.optimizer == "adam"
                         else keras.optimizers.SGD(learning_rate=0.01, momentum=0.9))
            if options.get("mixed_precision"):
                optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)
        if hvd:
            hvd.broadcast_variables(model.variables, root_rank=0)
        report.update(
            params=sum(int(tf.size(v)) for v in model.trainable_variables),
            versions={"tensorflow": tf.__version__, "keras": keras.__version__,
                      **({"horovod": sys.modules["horovod"].__version__} if hvd else {}),
                      **{k: v for k, v in tf.sysconfig.get_build_info().items()
                         if k in ("cuda_version", "cudnn_version")}},
            device_name=self.devices[0] if cell["device_type"] == "cpu"
            else tf.config.experimental.get_device_details(
                tf.config.list_physical_devices("GPU")[0]).get("device_name", "gpu"),
            layout="NHWC", local_devices=local_devices,
            replicas=hvd.size() if hvd else strategy.num_replicas_in_sync,
            threads="one intra-op pool of threads_per_device x local devices, shared by the "
                    "process's logical devices",
            xla=bool(options.get("xla")), mixed_precision=bool(options.get("mixed_precision")),
        )
        self.images_per_step = batch * local_devices

        def synthetic(context):
            images = tf.random.uniform([batch, size, size, workload.channels])
            labels = tf.random.uniform([batch], maxval=workload.classes, dtype=tf.int32)
            return images, labels

        images, labels = strategy.experimental_distribute_values_from_function(synthetic)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

        mode = cell["mode"]

        # Keras 3 scales the loss with scale_loss and unscales in apply_gradients; Keras 2
        # (TensorFlow 2.15, which Horovod builds against) scales and unscales by hand.
        by_hand = options.get("mixed_precision") and not hasattr(optimizer, "scale_loss")

        def replica_step(x, y):
            if mode == "forward":
                return tf.reduce_sum(tf.cast(model(x, training=False), tf.float32))
            with tf.GradientTape() as tape:
                logits = tf.cast(model(x, training=True), tf.float32)
                loss = tf.nn.compute_average_loss(loss_fn(y, logits),
                                                  global_batch_size=global_batch)
                scaled = loss
                if options.get("mixed_precision"):
                    scaled = (optimizer.get_scaled_loss(loss) if by_hand
                              else optimizer.scale_loss(loss))
            if hvd:
                tape = hvd.DistributedGradientTape(tape)
            grads = tape.gradient(scaled, model.trainable_variables)
            if by_hand:
                grads = optimizer.get_unscaled_gradients(grads)
            if mode == "forward_backward":
                # Returned, so that the gradients are computed rather than pruned.
                return tf.linalg.global_norm(grads)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        replica_step = tf.function(replica_step, jit_compile=bool(options.get("xla")))

        @tf.function
        def step():
            losses = strategy.run(replica_step, args=(images, labels))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

        @tf.function
        def total(value):
            if hvd:
                return hvd.allreduce(value, op=hvd.Sum)
            values = strategy.run(tf.identity, args=(value,))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, values, axis=None)

        self._step, self._total, self._last = step, total, None

    def step(self) -> None:
        self._last = self._step()

    def synchronize(self) -> None:
        if self._last is not None:
            self._last.numpy()

    def barrier(self) -> None:
        self._total(self.tf.constant(1.0)).numpy()

    def any_rank(self, flag: bool) -> bool:
        return bool(self._total(self.tf.constant(float(flag))).numpy() > 0)

    def profile(self, steps: int, path: str) -> Optional[bool]:
        """TensorFlow's profiler writes an XSpace; its TensorFlow operations (host) and kernels
        (GPU) become the Chrome trace at ``path``. Rank 0 only (None elsewhere)."""
        import glob
        import json

        from tensorflow.tsl.profiler.protobuf import xplane_pb2

        if self.rank > 0:
            # A second profiling worker of one MultiWorkerMirroredStrategy cluster dies
            # ("free(): invalid pointer"), so only rank 0 profiles; the others step along.
            for _ in range(steps):
                self.step()
            self.synchronize()
            return None
        logdir = path[:-len(".json")] + "-tf"
        self.tf.profiler.experimental.start(logdir)
        for _ in range(steps):
            self.step()
        self.synchronize()
        self.tf.profiler.experimental.stop()
        space = xplane_pb2.XSpace()
        with open(sorted(glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True))[-1], "rb") as pb:
            space.ParseFromString(pb.read())
        events = []
        for plane in space.planes:
            on_gpu = plane.name.startswith("/device:GPU")
            if plane.name != "/host:CPU" and not on_gpu:
                continue
            names = {key: meta.name for key, meta in plane.event_metadata.items()}
            for line in plane.lines:
                for event in line.events:
                    name = names.get(event.metadata_id, "")
                    if not on_gpu and not TF_OPERATION.match(name):
                        continue  # executor and runtime spans, not operations
                    events.append({
                        "name": name, "ph": "X", "tid": line.id,
                        "cat": "kernel" if on_gpu else "op",
                        "ts": line.timestamp_ns / 1e3 + event.offset_ps / 1e6,
                        "dur": event.duration_ps / 1e6})
        with open(path, "w") as trace:
            json.dump({"traceEvents": events}, trace)
        return self.cell["device_type"] == "gpu"

    def finish(self) -> dict:
        return memory_report(self.tf, self.cell, self.devices)


def build(cell: dict, report: dict, rank: int) -> TensorFlowSession:
    return TensorFlowSession(cell, report, rank)


if __name__ == "__main__":
    # The cap is TensorFlow's own allocator limit (cap_cpu_allocator), not an RLIMIT.
    run_worker(build, cap_heap=False)
