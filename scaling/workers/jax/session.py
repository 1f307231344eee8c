"""The JAX session that the timed loop (``scaling.workers.loop``) steps."""

from __future__ import annotations

from scaling.workers.compute import compute_report
from scaling.workers.jax.device import cap_memory, memory_report, versions
from scaling.workers.jax.hooks import JaxHooks
from scaling.workers.jax import input as jax_input
from scaling.workers.jax.model import build_model, initial_state, optimizer
from scaling.workers.jax.parallel import PARALLEL, JaxCollective, start
from scaling.workers.jax.step import JaxStep


class JaxSession(JaxHooks):
    """A Flax model's state on this process's devices, and its compiled step."""

    def __init__(self, jax, cell: dict, report: dict):
        import optax
        from flax import nnx

        from workloads import get_workload

        self.jax, self.cell, self.mode = jax, cell, cell["mode"]
        self.parallel = PARALLEL[cell["data_parallel"]](jax, cell)
        workload = get_workload(cell["workload"])
        amp = bool(cell["options"].get("amp"))
        graph, params, stats, rest = build_model(jax, nnx, workload, cell, amp)
        tx = optimizer(optax, workload)
        self.state = initial_state(jax, self.parallel, tx, self.mode, params, stats, rest)
        self.gradient_bytes = sum(leaf.nbytes for leaf in jax.tree.leaves(params))
        report.update(versions=versions(jax), device_name=self.parallel.devices[0].device_kind,
                      layout="NHWC", world_size=jax.process_count(),
                      params=sum(leaf.size for leaf in jax.tree.leaves(params)),
                      amp_dtype="bfloat16" if amp else None)
        self.workload = workload
        self.use_synthetic()
        report["data_sums"] = self.data_sums
        self.steps = JaxStep(jax, nnx, self.parallel, cell, graph, tx)
        self.step_fn = self.steps.compile(self.state, self.images, self.labels, report)
        report.update(compute_report(
            cell, "bf16" if amp else "fp32",
            lambda: self.steps.flops_per_image(self.state, self.images.shape[1:]),
            self.gradient_bytes, devices_sharing=len(self.parallel.local_devices)))
        self.output = None
        if cell["data"]:
            self.batches = jax_input.device_batches(self.parallel, cell, workload.channels)

    def use_synthetic(self) -> None:
        """From now on, every step trains on one synthetic batch per device, seeded by the
        replica's index."""
        self.images, self.labels, self.data_sums = jax_input.synthetic_batch(
            self.jax, self.parallel, self.cell, self.workload)
        self.images_per_step = self.cell["batch_size"] * len(self.parallel.local_devices)
        self.batches = None

    def loader_alone(self):
        """A fresh pipeline of this process's shard, with the same workers: each batch's image
        count, without end."""
        return jax_input.image_counts(self.cell, self.workload.channels,
                                      len(self.parallel.local_devices))

    def step(self) -> None:
        images, labels = next(self.batches) if self.batches else (self.images, self.labels)
        if self.mode == "forward":
            self.output = self.step_fn(*self.state, images, labels)
            return
        out = self.step_fn(*self.state, images, labels)
        if self.mode == "forward_backward":
            *self.state, self.output = out
        else:
            self.state = out
        self.state = tuple(self.state)

    def synchronize(self) -> None:
        self.parallel.wait((self.state, self.output))

    def barrier(self) -> None:
        self.parallel.barrier()

    def agree_max(self, value: int) -> int:
        return self.parallel.maximum(value)

    def finish(self) -> dict:
        report = memory_report(self.cell, self.parallel)
        if self.mode == "forward_backward":
            # Averaged over the devices in the step: one sum per replica this process drives.
            total = sum(float(leaf.addressable_shards[0].data.astype("float64").sum())
                        for leaf in self.jax.tree.leaves(self.output))
            report["gradient_sums"] = [total] * len(self.parallel.local_devices)
        self.parallel.finish()
        return report


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
