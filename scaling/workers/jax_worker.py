"""One JAX process: ``python -m scaling.workers.jax_worker CELL_DIR``.

The model is the workload's Flax NNX module (``workloads.flax_models``), split into its graph and
its state (parameters, BatchNorm statistics, the rest) so that a step is one pure ``jax.jit``
over the state, with optax's SGD with momentum (Adam for the MNIST MLP). The cell's
``data_parallel`` picks how the step spans the devices (``scaling.workers.jax_parallel``).

The step is compiled ahead of time, before the warm-up, and the compile time is reported as
``compile_s``. Dispatch is asynchronous: the timed loop waits for the device
(``block_until_ready``) only at chunk boundaries. XLA's ``RESOURCE_EXHAUSTED`` is out of memory.

Options: ``amp`` (every layer computes in bfloat16, its ``dtype``, over float32 parameters and
optimizer state, the loss in float32) and ``donate`` (true unless set false: the step donates the
buffers of the state it replaces, so the state is updated in place). Modes: ``train``; ``forward``
(the model in evaluation mode, no collective); ``forward_backward`` (the gradients, averaged over
the devices, are the step's output, with no update). Each replica's synthetic batch is seeded by
its index in the cell.
"""

from __future__ import annotations

import contextlib
import math
import os
import time

from scaling.workers import common
from scaling.workers.compute import compute_report
from scaling.workers.jax_parallel import PARALLEL, JaxCollective, start
from scaling.workers.loop import run_worker


INITIALISER_CACHE = os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "scaling",
    "jax-initialisers")
"""Where :func:`cached_initialisers` keeps the compiled initialisers, per user, as pip keeps
its wheels."""


@contextlib.contextmanager
def cached_initialisers(jax):
    """Inside, XLA's persistent compilation cache writes every program compiled, to
    ``INITIALISER_CACHE``; after, it writes none. A Flax model's construction compiles one
    initialiser per kernel shape (a truncated normal, about 0.2 s each on a CPU core, 20 s for
    GoogLeNet's), and later processes load them instead. The step, compiled after, is never
    written, so ``compile_s`` stays a compile. A cache folder the user set is left alone."""
    from jax.experimental.compilation_cache import compilation_cache

    if jax.config.jax_compilation_cache_dir not in (None, "", INITIALISER_CACHE):
        yield
        return
    if jax.config.jax_compilation_cache_dir != INITIALISER_CACHE:
        jax.config.update("jax_compilation_cache_dir", INITIALISER_CACHE)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        compilation_cache.reset_cache()  # in case this process compiled before, cache off
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    try:
        yield
    finally:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", math.inf)


class JaxSession:
    """A Flax model's state on this process's devices, and its compiled step."""

    def __init__(self, jax, cell: dict, report: dict):
        import numpy
        import optax
        from flax import nnx

        from workloads import get_workload

        self.jax, self.nnx, self.cell, self.mode = jax, nnx, cell, cell["mode"]
        self.parallel = PARALLEL[cell["data_parallel"]](jax, cell)
        self.workload = workload = get_workload(cell["workload"])
        with cached_initialisers(jax):
            model = workload.builder(cell["models"])(cell["image_size"], workload.classes)
        if self.mode == "forward":
            model.eval()
        else:
            model.train()
        self.amp = bool(cell["options"].get("amp"))
        if self.amp:
            # Every layer computes in bfloat16; its parameters stay float32 (param_dtype).
            model.set_attributes(dtype=jax.numpy.bfloat16, raise_if_not_found=False)
        self.graph, params, stats, rest = nnx.split(model, nnx.Param, nnx.BatchStat, ...)
        self.tx = (optax.adam(0.001) if workload.optimizer == "adam"
                   else optax.sgd(0.01, momentum=0.9))
        replicated = jax.sharding.PartitionSpec()
        self.state = jax.tree.map(lambda leaf: self.parallel.put(leaf, replicated),
                                  (params, stats, rest))
        if self.mode == "train":
            self.state = (*self.state, jax.jit(self.tx.init)(self.state[0]))
        self.gradient_bytes = sum(leaf.nbytes for leaf in jax.tree.leaves(params))
        report.update(versions=self._versions(), device_name=self.parallel.devices[0].device_kind,
                      layout="NHWC", world_size=jax.process_count(),
                      params=sum(leaf.size for leaf in jax.tree.leaves(params)),
                      amp_dtype="bfloat16" if self.amp else None)
        self.images, self.labels, report["data_sums"] = self._synthetic_batch(numpy)
        self.images_per_step = cell["batch_size"] * len(self.parallel.local_devices)
        self.step_fn = self._compile(report)
        report.update(compute_report(
            cell, "bf16" if self.amp else "fp32", self._flops_per_image, self.gradient_bytes,
            devices_sharing=len(self.parallel.local_devices)))
        self.output = None
        self._local_step = None

    def _synthetic_batch(self, numpy):
        """This process's replicas' batches, each seeded by its replica's index in the cell,
        as one array sharded over the devices; and the sum of each replica's images."""
        cell, workload = self.cell, self.workload
        first = self.jax.process_index() * len(self.parallel.local_devices)
        images, labels = [], []
        for replica in range(first, first + len(self.parallel.local_devices)):
            generator = numpy.random.default_rng(replica)
            size = cell["image_size"]
            images.append(generator.standard_normal(
                (cell["batch_size"], size, size, workload.channels), numpy.float32))
            labels.append(generator.integers(0, workload.classes, cell["batch_size"]))
        sharded = self.jax.sharding.PartitionSpec("data")
        return (self.parallel.put(numpy.concatenate(images), sharded),
                self.parallel.put(numpy.concatenate(labels).astype(numpy.int32), sharded),
                [float(batch.sum(dtype=numpy.float64)) for batch in images])

    def _loss(self, params, stats, rest, images, labels):
        """The mean cross-entropy of one device's batch, and its updated BatchNorm statistics
        and other state."""
        import jax.numpy as jnp
        import optax

        if self.amp:
            images = images.astype(jnp.bfloat16)
        model = self.nnx.merge(self.graph, params, stats, rest, copy=True)
        logits = model(images).astype(jnp.float32)
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
        _, _, stats, rest = self.nnx.split(model, self.nnx.Param, self.nnx.BatchStat, ...)
        return loss, (stats, rest)

    def _per_device_step(self):
        """The step of one device, by mode, with its state in and out."""
        import optax

        jax, mean = self.jax, self.parallel.mean

        def gradients(params, stats, rest, images, labels):
            (_, (stats, rest)), grads = jax.value_and_grad(self._loss, has_aux=True)(
                params, stats, rest, images, labels)
            return mean(grads), mean(stats), rest

        def train(params, stats, rest, opt_state, images, labels):
            grads, stats, rest = gradients(params, stats, rest, images, labels)
            updates, opt_state = self.tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), stats, rest, opt_state

        def forward_backward(params, stats, rest, images, labels):
            grads, stats, rest = gradients(params, stats, rest, images, labels)
            return params, stats, rest, grads

        def forward(params, stats, rest, images, labels):
            model = self.nnx.merge(self.graph, params, stats, rest, copy=True)
            return model(images.astype("bfloat16") if self.amp else images)

        return {"train": train, "forward_backward": forward_backward, "forward": forward}[
            self.mode]

    def _compile(self, report: dict):
        """The jitted step, compiled for the session's arrays before the warm-up; its compile
        time goes into ``report``."""
        from jax.sharding import PartitionSpec

        state, sharded = PartitionSpec(), PartitionSpec("data")
        state_specs = (state,) * len(self.state)
        out_specs = sharded if self.mode == "forward" else \
            state_specs + ((state,) if self.mode == "forward_backward" else ())
        step = self.parallel.wrap(self._per_device_step(), state_specs + (sharded, sharded),
                                  out_specs)
        donate = tuple(range(len(self.state))) if self.cell["options"].get("donate", True) \
            and self.mode != "forward" else ()
        started = time.perf_counter()
        compiled = self.jax.jit(step, donate_argnums=donate).lower(
            *self.state, self.images, self.labels).compile()
        report["compile_s"] = time.perf_counter() - started
        return compiled

    def _flops_per_image(self) -> float:
        """One image's FLOPs in the cell's mode, counted on the model's jaxpr by torch's rules
        (``scaling.workers.jax_flops``): the forward pass in ``forward``, otherwise forward and
        backward (an update is elementwise, as the other frameworks' counters leave it out)."""
        from scaling.workers import jax_flops

        jax = self.jax
        shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), self.state[:3])
        return jax_flops.flops_per_image(jax, self.nnx, self.graph, shapes,
                                         self.images.shape[1:], self.mode)

    def step(self) -> None:
        if self.mode == "forward":
            self.output = self.step_fn(*self.state, self.images, self.labels)
            return
        out = self.step_fn(*self.state, self.images, self.labels)
        if self.mode == "forward_backward":
            *self.state, self.output = out
        else:
            self.state = out
        self.state = tuple(self.state)

    def synchronize(self) -> None:
        self.parallel.wait((self.state, self.output))

    def local_steps(self, count: int) -> None:
        """``count`` forward and backward passes on every device of the process, with no
        gradient aggregated and no update; waits for them."""
        if self._local_step is None:
            self._local_step = self._compile_local()
        arguments = (*self.state[:3], self.images, self.labels)
        if self.jax.process_count() > 1:
            arguments = self.jax.tree.map(lambda leaf: leaf.addressable_shards[0].data,
                                          arguments)
        for _ in range(count):
            sums = self._local_step(*arguments)
        self.jax.block_until_ready(sums)

    def _compile_local(self):
        """The jitted forward and backward pass of each device on its own batch, returning the
        sum of its gradients (so that none is left out). Over several processes, each runs its
        own device's arrays in a program of its own, so that no program spans the processes
        (one would interleave with the collective timed beside it)."""
        from jax.sharding import PartitionSpec

        jax = self.jax

        def local(params, stats, rest, images, labels):
            _, grads = jax.value_and_grad(self._loss, has_aux=True)(params, stats, rest,
                                                                      images, labels)
            return sum(jax.numpy.sum(leaf) for leaf in jax.tree.leaves(grads)).reshape(1)

        if jax.process_count() > 1:
            return jax.jit(local)
        sharded = PartitionSpec("data")
        return jax.jit(self.parallel.wrap(local, (PartitionSpec(),) * 3 + (sharded, sharded),
                                          sharded))

    def barrier(self) -> None:
        self.parallel.barrier()

    def agree_max(self, value: int) -> int:
        return self.parallel.maximum(value)

    def profile(self, steps: int, path: str) -> bool:
        from scaling.workers import jax_profile

        def run_steps():
            for _ in range(steps):
                self.step()
            self.synchronize()

        jax_profile.profile(self.jax, run_steps, path, self.step_fn.as_text())
        return self.cell["device_type"] == "gpu"

    def collective(self) -> JaxCollective:
        return JaxCollective(self.jax, self.parallel)

    def finish(self) -> dict:
        report = self._memory()
        if self.mode == "forward_backward":
            # Averaged over the devices in the step: one sum per replica this process drives.
            total = sum(float(leaf.addressable_shards[0].data.astype("float64").sum())
                        for leaf in self.jax.tree.leaves(self.output))
            report["gradient_sums"] = [total] * len(self.parallel.local_devices)
        self.parallel.finish()
        return report

    def _memory(self) -> dict:
        """Peak memory, and the peak and capacity of the memory that OOM is decided on: the
        heap under the CPU cap, or the first device's allocator on a GPU."""
        if self.cell["device_type"] == "cpu":
            return {"peak_memory_bytes": common.peak_rss_bytes(), **common.cpu_memory_headroom()}
        stats = self.parallel.local_devices[0].memory_stats()
        return {"peak_memory_bytes": stats["peak_bytes_in_use"],
                "capped_memory_peak_bytes": stats["peak_bytes_in_use"],
                "memory_capacity_bytes": stats["bytes_limit"]}

    def _versions(self) -> dict:
        import flax
        import jaxlib
        import optax

        return {"jax": self.jax.__version__, "jaxlib": jaxlib.__version__,
                "flax": flax.__version__, "optax": optax.__version__}


def build(cell: dict, report: dict, rank: int) -> JaxSession:
    cap_memory(cell)
    return JaxSession(start(cell), cell, report)


def collective(cell: dict, report: dict, rank: int) -> JaxCollective:
    """The collective alone, for a cell of purpose ``allreduce``."""
    cap_memory(cell)
    jax = start(cell)
    parallel = PARALLEL[cell["data_parallel"]](jax, cell)
    report.update(versions={"jax": jax.__version__},
                  device_name=parallel.devices[0].device_kind)
    return JaxCollective(jax, parallel)


def cap_memory(cell: dict) -> None:
    """The cell's per-device CPU memory cap, times this process's devices, on its heap
    (before JAX is imported)."""
    if cell["memory_limit"] and cell["device_type"] == "cpu":
        common.apply_memory_limit(cell["memory_limit"] * cell["local_devices"])


if __name__ == "__main__":
    run_worker(build, cap_heap=False, collective=collective)
