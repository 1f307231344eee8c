"""The synthetic input of a JAX process: one batch per replica it drives, seeded by the
replica's index in the cell."""

from __future__ import annotations


def synthetic_batch(jax, numpy, parallel, cell: dict, workload):
    """This process's replicas' batches, each seeded by its replica's index in the cell,
    as one array sharded over the devices; and the sum of each replica's images."""
    first = jax.process_index() * len(parallel.local_devices)
    images, labels = [], []
    for replica in range(first, first + len(parallel.local_devices)):
        generator = numpy.random.default_rng(replica)
        size = cell["image_size"]
        images.append(generator.standard_normal(
            (cell["batch_size"], size, size, workload.channels), numpy.float32))
        labels.append(generator.integers(0, workload.classes, cell["batch_size"]))
    sharded = jax.sharding.PartitionSpec("data")
    return (parallel.put(numpy.concatenate(images), sharded),
            parallel.put(numpy.concatenate(labels).astype(numpy.int32), sharded),
            [float(batch.sum(dtype=numpy.float64)) for batch in images])
