"""The TensorFlow session that the timed loop (``scaling.workers.loop``) steps."""

from __future__ import annotations

from scaling.workers.compute import compute_report
from scaling.workers.tensorflow.device import (cap_cpu_allocator, configure_devices, description,
                                               memory_report, refuse_unrunnable_options)
from scaling.workers.tensorflow.flops import flops_per_image
from scaling.workers.tensorflow.hooks import TensorFlowHooks
from scaling.workers.tensorflow.input import distributed_batches, image_counts
from scaling.workers.tensorflow.model import build_model
from scaling.workers.tensorflow.step import ReplicaSteps
from scaling.workers.tensorflow.strategies import STRATEGIES


class TensorFlowSession(TensorFlowHooks):
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
        trainable = build_model(keras, strategy, self.parallel, workload, cell)
        report.update(description(tf, keras, cell, self.parallel, strategy, trainable.model,
                                  self.devices))
        report["communication_in_effect"] = self.parallel.communication_in_effect(
            strategy, trainable.model)
        self.gradient_bytes = sum(tf.as_dtype(v.dtype).size * int(tf.size(v))
                                  for v in trainable.model.trainable_variables)
        report.update(compute_report(
            cell, "fp16" if cell["options"].get("mixed_precision") else "fp32",
            lambda: flops_per_image(
                tf, lambda: workload.builder(cell["models"])(cell["image_size"],
                                                             workload.classes),
                workload, cell["image_size"], self.mode),
            self.gradient_bytes, devices_sharing=cell["local_devices"]))
        self.images_per_step = cell["batch_size"] * cell["local_devices"]
        self.strategy, self.workload, self.batches = strategy, workload, None
        self.steps = ReplicaSteps(tf, strategy, self.parallel, trainable,
                                  bool(cell["options"].get("xla")))
        if cell["data"]:
            self.batches = distributed_batches(tf, strategy, cell, workload.channels)
            self._step = self._step_function(self.mode)
        else:
            self.use_synthetic()
        self._total, self._last = self.parallel.sum_function(strategy), None

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
        return image_counts(self.tf, self.cell, self.workload.channels)

    def _step_function(self, mode: str):
        """One step in ``mode`` over every replica of the process, on the next batches of
        ``self.batches`` or else on the synthetic ones; it returns each replica's result (its
        loss, or in forward_backward the sum of the aggregated gradients)."""
        if self.batches is None:
            return self.steps.on_inputs(mode, self.images, self.labels)
        return self.steps.on_batches(mode, self.batches)

    def step(self) -> None:
        self._last = self._step()

    def synchronize(self) -> None:
        for result in self._last or ():
            result.numpy()

    def barrier(self) -> None:
        self._total(self.tf.constant(1.0)).numpy()

    def agree_max(self, value: int) -> int:
        return self.parallel.maximum(self.strategy, value)

    def finish(self) -> dict:
        report = memory_report(self.tf, self.cell, self.devices, self.parallel.first_gpu)
        local = self.strategy.experimental_local_results
        report["data_sums"] = [float(self.tf.reduce_sum(images)) for images in local(self.images)]
        if self.mode == "forward_backward":
            # The last step's: a train step keeps no gradients, and one more step to get them
            # would trace and compile a second program after the window.
            report["gradient_sums"] = [float(value) for value in self._last]
        self.parallel.finish()
        return report


def build(cell: dict, report: dict, rank: int) -> TensorFlowSession:
    return TensorFlowSession(cell, report, rank)
