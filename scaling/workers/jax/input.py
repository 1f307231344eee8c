"""The input of a JAX process: one synthetic batch per replica it drives, seeded by the
replica's index in the cell; or real images through a Grain pipeline over this process's shard.

The pipeline lists the process's shard (``input_data.process_shard``: every process count-th file
from its index on), shuffles it (seeded, again each pass, Grain's ``shuffle`` before
``repeat``), decodes each image with Pillow and augments it as ``scaling.workers.input_data``
says (a random resized crop drawn as torchvision draws it, a horizontal flip, normalisation;
Grain's ``random_map`` seeds each image's draw by its index), and batches it with every batch
full: ``batch_size`` images per device the process drives, sharded over them. ``loader_workers``
N > 0 worker processes build the batches (Grain's ``mp_prefetch``); 0 builds them in this
process, one at a time. A shard of fewer images than one batch is an error, as in every
framework.
"""

from __future__ import annotations

import functools
import math
from typing import Iterator, Tuple

from scaling.workers import input_data


def synthetic_batch(jax, parallel, cell: dict, workload):
    """This process's replicas' batches, each seeded by its replica's index in the cell,
    as one array sharded over the devices; and the sum of each replica's images."""
    import numpy

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


def crop_box(width: int, height: int, rng) -> Tuple[int, int, int, int]:
    """(left, top, right, bottom) of a random resized crop, as torchvision's
    ``RandomResizedCrop`` draws it: an area of 8-100% of the image at an aspect ratio of 3/4 to
    4/3 (uniform in its logarithm), ten tries, then the centre at the nearest ratio."""
    area = width * height
    for _ in range(10):
        target = area * rng.uniform(0.08, 1.0)
        ratio = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
        w, h = round(math.sqrt(target * ratio)), round(math.sqrt(target / ratio))
        if 0 < w <= width and 0 < h <= height:
            left, top = int(rng.integers(0, width - w + 1)), int(rng.integers(0, height - h + 1))
            return left, top, left + w, top + h
    ratio = width / height
    w, h = ((width, round(width / (4 / 3))) if ratio > 4 / 3 else
            (round(height * (3 / 4)), height) if ratio < 3 / 4 else (width, height))
    left, top = (width - w) // 2, (height - h) // 2
    return left, top, left + w, top + h


def augment(item, rng, size: int, channels: int):
    """One file of the shard, decoded and augmented as ``input_data`` says: (an image of
    ``size`` x ``size`` x ``channels``, normalised float32; its class index)."""
    import numpy
    from PIL import Image

    path, label = item
    with Image.open(path) as image:
        image = image.convert("L" if channels == 1 else "RGB")
        image = image.resize((size, size), Image.BILINEAR, box=crop_box(*image.size, rng))
    array = numpy.asarray(image, numpy.float32).reshape(size, size, channels) / 255.0
    if rng.random() < 0.5:
        array = array[:, ::-1]
    mean, std = input_data.normalisation(channels)
    return (array - numpy.asarray(mean, numpy.float32)) / numpy.asarray(std, numpy.float32), label


def dataset(cell: dict, channels: int, batch: int):
    """This process's Grain pipeline of (images, labels) batches of ``batch`` images: its
    shard, shuffled (seeded, again each pass), without end; ``loader_workers`` N > 0 worker
    processes build the batches (Grain's ``mp_prefetch``), 0 builds them in this process."""
    import grain

    files = input_data.process_shard(cell)
    pipeline = (grain.MapDataset.source(files).shuffle(seed=0).repeat()
                .random_map(functools.partial(augment, size=cell["image_size"],
                                              channels=channels), seed=0)
                .batch(batch, drop_remainder=True)
                .to_iter_dataset(grain.ReadOptions(num_threads=0)))
    workers = cell["loader_workers"]
    if not workers:
        return pipeline
    from absl import flags

    if not flags.FLAGS.is_parsed():  # Grain's worker processes read its absl flags
        flags.FLAGS.mark_as_parsed()
    return pipeline.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))


def device_batches(parallel, cell: dict, channels: int) -> Iterator:
    """(images, labels) of the process's devices without end: each batch of the pipeline
    (``batch_size`` images per local device) sharded over them."""
    import numpy

    sharded = parallel.jax.sharding.PartitionSpec("data")
    for images, labels in dataset(cell, channels,
                                  cell["batch_size"] * len(parallel.local_devices)):
        yield (parallel.put(images, sharded),
               parallel.put(numpy.asarray(labels, numpy.int32), sharded))


def image_counts(cell: dict, channels: int, local_devices: int) -> Iterator[int]:
    """The image count of each of this process's batches, from a fresh pipeline, without end
    and without a model."""
    for _, labels in dataset(cell, channels, cell["batch_size"] * local_devices):
        yield len(labels)
