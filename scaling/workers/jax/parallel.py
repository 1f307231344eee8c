"""The JAX data-parallel mechanisms, by the cell's ``data_parallel``, and their allreduce.

- ``none`` (launcher ``single``): one device; the per-device step is jitted as it is.
- ``mesh`` (launcher ``jax``): this process's devices form a one-axis mesh (axis ``data``). The
  batch is one array sharded over the axis (``NamedSharding``), the state replicated, and the
  per-device step runs under ``jax.shard_map`` inside the one ``jax.jit``: each device
  normalizes with its own BatchNorm statistics, as DDP's replicas do, and the step averages the
  gradients (and the BatchNorm running averages) with ``jax.lax.pmean`` over the axis.
- ``distributed`` (launcher ``jax-distributed``): the same over the devices of every process,
  after ``jax.distributed.initialize`` with the coordinator, rank and world size the launcher
  gives; on CPU the collectives go through gloo.

Called before any JAX backend starts: :func:`start` pins the process to its cores (XLA's CPU
thread pool sizes itself from them) and sets its CPU device count.
"""

from __future__ import annotations

import itertools
import os
import time
from typing import List

from scaling.workers import common
from scaling.workers.jax import communication

AXIS = "data"
POLL_S = 0.001
"""How often a wait looks at the devices' parts of a step."""
COORDINATOR_ENV = "SCALING_JAX_COORDINATOR"
"""``host:port`` of the coordinator of ``jax.distributed.initialize``, set by the launcher."""


def claim_cores(threads: int, local_rank: int) -> None:
    """Pin this process to ``threads`` of the cores it may use, the ``local_rank``-th block of
    them (wrapping round when the node has fewer), so that XLA's CPU thread pool, which sizes
    itself from the process's cores, has the cell's threads."""
    allowed = sorted(os.sched_getaffinity(0))
    count = min(threads, len(allowed))
    first = local_rank * count
    os.sched_setaffinity(0, {allowed[(first + i) % len(allowed)] for i in range(count)})


def start(cell: dict):
    """Configure JAX for this process of ``cell`` (cores, CPU devices, the distributed
    runtime) and return ``jax``."""
    rank, local_rank, world_size = common.process_ranks()
    devices = cell["local_devices"]
    communication.apply(cell)
    if cell["device_type"] == "cpu":
        claim_cores(cell["threads_per_device"] * devices, local_rank)
    import jax

    if cell["device_type"] == "cpu":
        jax.config.update("jax_platforms", "cpu")
        jax.config.update("jax_num_cpu_devices", devices)
    if cell["data_parallel"] == "distributed":
        if cell["device_type"] == "cpu":
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(os.environ[COORDINATOR_ENV], num_processes=world_size,
                                   process_id=rank)
    return jax


class NoParallel:
    """One device, no mesh: the per-device step runs as it is."""

    def __init__(self, jax, cell: dict):
        self.jax = jax
        self.devices: List = jax.local_devices()[:1]
        self.local_devices = self.devices

    def wrap(self, step, in_specs, out_specs):
        return step

    def mean(self, tree):
        return tree

    def put(self, array, spec):
        """``array`` (this process's part along a sharded axis) on the devices."""
        return self.jax.device_put(array, self.devices[0])

    def wait(self, tree) -> None:
        """Wait until the arrays of ``tree`` are computed; raise the error of a device that
        failed."""
        self.jax.block_until_ready(tree)

    def barrier(self) -> None:
        """One process: nothing to wait for."""

    def maximum(self, value: int) -> int:
        """The largest ``value`` of the cell's processes: this one's."""
        return value

    def finish(self) -> None:
        """Nothing to leave."""


class MeshParallel(NoParallel):
    """The per-device step under ``shard_map`` over a one-axis mesh of every device of the
    cell (this process's, or with ``distributed`` every process's)."""

    def __init__(self, jax, cell: dict):
        import numpy
        from jax.sharding import Mesh

        self.jax = jax
        count = cell["devices"] * cell["nodes"]
        self.devices = jax.devices()[:count] if cell["data_parallel"] == "distributed" \
            else jax.local_devices()[:count]
        self.local_devices = [d for d in self.devices if d.process_index == jax.process_index()]
        self.mesh = Mesh(numpy.array(self.devices), (AXIS,))

    def wrap(self, step, in_specs, out_specs):
        return self.jax.shard_map(step, mesh=self.mesh, in_specs=in_specs, out_specs=out_specs)

    def mean(self, tree):
        return self.jax.lax.pmean(tree, AXIS)

    def wait(self, tree) -> None:
        """Wait for every device's part of the step that made ``tree``, each on its own, and
        raise the first error as soon as one device has it. On a CPU a device whose step failed
        (an allocation over the memory cap) leaves the others waiting at the step's allreduce,
        which XLA ends by aborting the process after 40 s; the error is raised before then."""
        shards = [shard.data for shard in self.jax.tree.leaves(tree)[0].addressable_shards]
        while shards:
            ready = [shard.is_ready() for shard in shards]
            for shard in itertools.compress(shards, ready):
                shard.block_until_ready()
            shards = [shard for shard, done in zip(shards, ready) if not done]
            time.sleep(POLL_S)
        self.jax.block_until_ready(tree)

    def sharding(self, spec):
        from jax.sharding import NamedSharding

        return NamedSharding(self.mesh, spec)

    def put(self, array, spec):
        """This process's part of a global array: its rows, for an array sharded over the axis,
        or the whole of a replicated one (the same on every process)."""
        if spec == self.jax.sharding.PartitionSpec():
            return self.jax.make_array_from_callback(array.shape, self.sharding(spec),
                                                     lambda index: array[index])
        return self.jax.make_array_from_process_local_data(self.sharding(spec), array)


class DistributedParallel(MeshParallel):
    """:class:`MeshParallel` over the processes of ``jax.distributed``."""

    def barrier(self) -> None:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices("scaling barrier")

    def maximum(self, value: int) -> int:
        """The largest ``value`` of the processes."""
        import numpy
        from jax.experimental import multihost_utils

        return int(numpy.max(multihost_utils.process_allgather(numpy.array([value]))))

    def finish(self) -> None:
        self.jax.distributed.shutdown()


PARALLEL = {"none": NoParallel, "mesh": MeshParallel, "distributed": DistributedParallel}


class JaxCollective:
    """The mechanism's allreduce (``scaling.workers.collective``): a ``psum`` over the mesh
    inside a jitted ``shard_map``, on one float32 buffer per device.

    On a CPU each allreduce waits for its result before the next is queued: XLA's in-process
    CPU collectives can deadlock when many programs that only communicate are queued at once
    (seen with jaxlib 0.10.2 on two devices), which training steps, with their compute, never
    showed."""

    def __init__(self, jax, parallel):
        from jax.sharding import PartitionSpec

        self.jax, self.parallel = jax, parallel
        self.wait_each = parallel.devices[0].platform == "cpu"
        self.devices = len(parallel.devices)
        spec = PartitionSpec(AXIS)
        self.sum = jax.jit(parallel.wrap(lambda x: jax.lax.psum(x, AXIS), (spec,), spec),
                           donate_argnums=0)
        self.spec, self.buffer = spec, None

    def prepare(self, count: int) -> None:
        import numpy

        rows = numpy.ones((len(self.parallel.local_devices) * count,), numpy.float32)
        self.buffer = self.parallel.put(rows, self.spec)

    def allreduce(self) -> None:
        self.buffer = self.sum(self.buffer)
        if self.wait_each:
            self.buffer.block_until_ready()

    def first_value(self) -> float:
        return float(self.buffer.addressable_shards[0].data[0])

    def zero(self) -> None:
        self.buffer = self.buffer * 0

    def synchronize(self) -> None:
        self.buffer.block_until_ready()

    def barrier(self) -> None:
        self.parallel.barrier()

    def finish(self) -> dict:
        self.parallel.finish()
        return {}
