"""How one TensorFlow process is data-parallel: a class per value of the cell's
``data_parallel``.

Each makes the tf.distribute strategy that the model is built and stepped under, and says what
the session does differently under it: the process's first GPU, how the gradients are
aggregated, what is broadcast once the model is built, which replicas the process drives and
how a value is summed, and its maximum taken, over the cell.

- ``mirrored``: MirroredStrategy over this process's devices, with the cross-device ops of the
  option ``cross_device_ops`` (by default NCCL on GPU, a reduction to one device on CPU);
- ``multiworker``: one worker of a MultiWorkerMirroredStrategy cluster described by TF_CONFIG,
  with the options ``implementation`` (by default NCCL on GPU, ring collectives on CPU) and
  ``pack_mb``;
- ``none``: one process on one device under the default strategy, the ``single`` baseline;
- ``horovod``: one Horovod rank on one device, under TensorFlow's default strategy, with
  ``hvd.DistributedGradientTape`` (compressing the gradients as the option ``compression``
  says) and the variables broadcast from rank 0 (for TensorFlow 2.15, which Horovod 0.28.1
  builds against).
"""

from __future__ import annotations

from typing import Dict

NCCL_ON_CPU = "NCCL reduces over GPUs only: TensorFlow has no NCCL kernel for CPU devices"


class Plain:
    """One process under TensorFlow's default strategy, with no data parallelism of its own;
    the strategy's replicas are every replica of the cell. The base of the others."""

    def __init__(self, tf, cell: Dict):
        self.tf, self.cell = tf, cell
        self.gpu = cell["device_type"] == "gpu"

    @property
    def first_gpu(self) -> int:
        """The first of the machine's GPUs that this process drives."""
        return 0

    def make_strategy(self, devices):
        return self.tf.distribute.get_strategy()

    def versions(self) -> Dict[str, str]:
        """Versions of what the mechanism adds to TensorFlow."""
        return {}

    def communication_in_effect(self, strategy, model) -> Dict:
        """The communication settings in effect, read back from the strategy: knob name ->
        value (the rank report's ``communication_in_effect``)."""
        return {}

    def broadcast(self, variables) -> None:
        """Give every process the same initial ``variables`` (a strategy mirrors its own)."""

    def finish(self) -> None:
        """After the cell's last collective: take down what the strategy does not."""

    def replicas(self, strategy) -> int:
        """Replicas over the whole cell."""
        return strategy.num_replicas_in_sync

    def gradient_tape(self, tape):
        """The tape whose gradients the step applies (the strategy reduces them itself)."""
        return tape

    def replica_index(self, context) -> int:
        """The cell-wide index of the replica that a ``ValueContext`` describes."""
        return context.replica_id_in_sync_group

    def aggregate(self, grads):
        """In a replica's step, ``grads`` summed over every replica of the cell, as
        ``apply_gradients`` sums them (the loss is averaged over the global batch)."""
        return self.tf.distribute.get_replica_context().all_reduce(
            self.tf.distribute.ReduceOp.SUM, grads)

    def sum_function(self, strategy):
        """A tf.function that sums a scalar over every process of the cell."""
        tf = self.tf

        @tf.function
        def total(value):
            values = strategy.run(tf.identity, args=(value,))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, values, axis=None)

        return total

    def maximum(self, strategy, value: int) -> int:
        """The largest ``value`` of the cell's processes: this one's (the strategy's replicas
        are all in this process)."""
        return value

    def allreduce_function(self, strategy):
        """A tf.function that sums per-replica values over every replica of the cell, through
        the strategy's cross-device (or collective) ops, returning each replica's sum."""
        tf = self.tf

        def replica_sum(value):
            # The identity places the value on the replica's device; MultiWorkerMirrored
            # finds no destination for a value that no replica op produced.
            return tf.distribute.get_replica_context().all_reduce(
                tf.distribute.ReduceOp.SUM, tf.identity(value))

        return tf.function(lambda values: strategy.run(replica_sum, args=(values,)))


class Mirrored(Plain):
    """MirroredStrategy over the devices of this one process, with the cross-device ops of the
    option ``cross_device_ops``."""

    def make_strategy(self, devices):
        distribute = self.tf.distribute
        choice = self.cell["options"].get("cross_device_ops", "auto")
        if choice == "auto":
            choice = "nccl" if self.gpu else "reduce_to_one"
        if choice == "nccl" and not self.gpu:
            raise RuntimeError(f"cross_device_ops nccl does not run on CPU: {NCCL_ON_CPU}; "
                               "use reduce_to_one or hierarchical_copy")
        reduce_ops = {
            "nccl": distribute.NcclAllReduce,
            "hierarchical_copy": distribute.HierarchicalCopyAllReduce,
            "reduce_to_one": lambda: distribute.ReductionToOneDevice(
                reduce_to_device=None if self.gpu else "/cpu:0"),
        }[choice]()
        return distribute.MirroredStrategy(devices=devices, cross_device_ops=reduce_ops)

    def communication_in_effect(self, strategy, model) -> Dict:
        """The class of the cross-device ops that the strategy reduces a float gradient with
        (on GPU under XLA, TensorFlow swaps in CollectiveAllReduce: it says so here)."""
        if self.gpu and self.cell["options"].get("xla"):
            return {"cross_device_ops": "CollectiveAllReduce"}
        ops = strategy.extended._get_cross_device_ops(self.tf.constant(0.0))  # noqa: SLF001
        return {"cross_device_ops": type(ops).__name__}


class MultiWorker(Plain):
    """One worker of a MultiWorkerMirroredStrategy cluster; TF_CONFIG names the others."""

    def maximum(self, strategy, value: int) -> int:
        """The largest ``value`` of the workers, gathered by every replica of the cluster (the
        strategy reduces by sum and mean only)."""
        tf = self.tf

        def replica_max(value):
            return tf.reduce_max(tf.distribute.get_replica_context().all_gather(
                tf.identity(value), axis=0))

        results = strategy.experimental_local_results(
            strategy.run(tf.function(replica_max), args=(tf.constant([float(value)]),)))
        return int(results[0].numpy())

    def make_strategy(self, devices):
        experimental, options = self.tf.distribute.experimental, self.cell["options"]
        choice = options.get("implementation", "nccl" if self.gpu else "ring")
        if choice == "nccl" and not self.gpu:
            raise RuntimeError(f"implementation nccl does not run on CPU: {NCCL_ON_CPU}; "
                               "use ring or auto")
        # Unset, bytes_per_pack is TensorFlow's 0: every gradient of a step in one pack.
        return self.tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=experimental.CommunicationOptions(
                implementation=getattr(experimental.CommunicationImplementation, choice.upper()),
                bytes_per_pack=int(options.get("pack_mb", 0) * 2**20)))

    def communication_in_effect(self, strategy, model) -> Dict:
        """The options of the strategy's collective all-reduce, and into how many packs it
        splits the model's gradients with them (TensorFlow's own grouping, over the gradients
        in the reversed order that it packs them in)."""
        from tensorflow.python.distribute import cross_device_utils

        options = strategy.extended._cross_device_ops._options  # noqa: SLF001
        gradients = [self.tf.TensorSpec(v.shape, v.dtype)
                     for v in reversed(model.trainable_variables)]
        return {"implementation": options.implementation.name.lower(),
                "pack_mb": options.bytes_per_pack / 2**20,
                "gradient_packs": len(cross_device_utils.group_by_size(
                    gradients, options.bytes_per_pack))}


class Horovod(Plain):
    """One Horovod rank on one device: the tape allreduces the gradients."""

    def __init__(self, tf, cell: Dict):
        super().__init__(tf, cell)
        if cell["options"].get("xla"):
            raise RuntimeError(
                "xla does not run under Horovod: its allreduce inside the jit-compiled step "
                "has no XLA kernel in this build; run horovod without xla")
        import horovod
        import horovod.tensorflow as hvd

        from scaling.workers.horovod_knobs import init_horovod

        self.hvd, self.version = hvd, horovod.__version__
        self.compression, self.settings = init_horovod(hvd, cell["options"])

    def communication_in_effect(self, strategy, model) -> Dict:
        """The fusion threshold and cycle time that ``hvd.init`` read, and the compression of
        a tape made as the step makes its own, read off its allreduce function."""
        from scaling.workers.horovod_knobs import horovod_in_effect

        tape = self.gradient_tape(self.tf.GradientTape())
        allreduce = getattr(tape._allreduce_grads, "python_function", tape._allreduce_grads)
        held = [cell.cell_contents for cell in allreduce.__closure__ or ()
                if isinstance(cell.cell_contents, type)
                and issubclass(cell.cell_contents, self.hvd.compression.Compressor)]
        return horovod_in_effect(self.settings, held[0] if held else None)

    @property
    def first_gpu(self) -> int:
        return self.hvd.local_rank()

    def versions(self) -> Dict[str, str]:
        return {"horovod": self.version}

    def broadcast(self, variables) -> None:
        self.hvd.broadcast_variables(variables, root_rank=0)

    def replicas(self, strategy) -> int:
        return self.hvd.size()

    def gradient_tape(self, tape):
        return self.hvd.DistributedGradientTape(tape, compression=self.compression)

    def replica_index(self, context) -> int:
        """The rank: each rank drives one replica under the default strategy."""
        return self.hvd.rank()

    def aggregate(self, grads):
        """The tape has allreduced them already."""
        return grads

    def sum_function(self, strategy):
        hvd = self.hvd
        return self.tf.function(lambda value: hvd.allreduce(value, op=hvd.Sum))

    def maximum(self, strategy, value: int) -> int:
        hvd = self.hvd
        return int(hvd.allreduce(self.tf.constant([value]), op=hvd.Max).numpy()[0])

    def allreduce_function(self, strategy):
        return self.sum_function(strategy)

    def finish(self) -> None:
        """Every rank leaves Horovod together: a rank that exited with its background loop
        still running would reset the other ranks' connections, and fail a peer not yet done
        with the last collective."""
        self.hvd.shutdown()


STRATEGIES = {"none": Plain, "mirrored": Mirrored, "multiworker": MultiWorker,
              "horovod": Horovod}
"""The data-parallel mechanism of each ``data_parallel`` value."""
