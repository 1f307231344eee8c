"""Real images into a TensorFlow process: a ``tf.data`` pipeline over this process's shard.

The pipeline lists the process's shard (``input_data.process_shard``), shuffles it (seeded, again
each pass), repeats it without end, decodes and augments each image as
``scaling.workers.input_data`` says (a random resized crop through
``tf.image.sample_distorted_bounding_box``, a horizontal flip, normalisation), batches it with
every batch full and prefetches (``AUTOTUNE``). A replica's batch is ``batch_size`` images;
``strategy.distribute_datasets_from_function`` hands the local replicas successive batches. A
shard of fewer images than one batch is an error, as in every framework.

``loader_workers`` N > 0 is the map's ``num_parallel_calls`` and the size of the pipeline's
private thread pool; 0 is a sequential map (never parallelised by tf.data's optimizations) on
a private pool of one thread.
"""

from __future__ import annotations

from typing import Iterator

from scaling.workers import input_data


def dataset(tf, cell: dict, channels: int, batch: int):
    """This process's pipeline, in batches of ``batch`` images."""
    files = input_data.process_shard(cell)
    paths, labels = [path for path, _ in files], [label for _, label in files]
    mean, std = input_data.normalisation(channels)
    size, workers = cell["image_size"], cell["loader_workers"]

    def augment(path, label):
        image = tf.io.decode_jpeg(tf.io.read_file(path), channels=channels)
        begin, extent, _ = tf.image.sample_distorted_bounding_box(
            tf.shape(image), bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]),
            min_object_covered=0.0, aspect_ratio_range=(3 / 4, 4 / 3), area_range=(0.08, 1.0),
            use_image_if_no_bounding_boxes=True)
        image = tf.image.resize(tf.slice(image, begin, extent), [size, size], antialias=True)
        image = tf.image.random_flip_left_right(image) / 255.0
        return (image - mean) / std, label

    options = tf.data.Options()
    options.threading.private_threadpool_size = max(1, workers)
    options.experimental_optimization.map_parallelization = workers > 0
    return (tf.data.Dataset.from_tensor_slices((paths, labels))
            .shuffle(len(paths), seed=0, reshuffle_each_iteration=True)
            .repeat()
            .map(augment, num_parallel_calls=workers or None)
            .batch(batch, drop_remainder=True)
            .prefetch(tf.data.AUTOTUNE)
            .with_options(options))


def distributed_batches(tf, strategy, cell: dict, channels: int):
    """An iterator of the strategy's replicas' batches: one pipeline per process, since the
    process's shard is its own; the local replicas take its successive batches."""
    return iter(strategy.distribute_datasets_from_function(
        lambda context: dataset(tf, cell, channels, cell["batch_size"])))


def image_counts(tf, cell: dict, channels: int) -> Iterator[int]:
    """The image count of each of this process's batches (``batch_size`` per local device),
    from a fresh pipeline on the host, without end and without a model."""
    with tf.device("/cpu:0"):
        batches = iter(dataset(tf, cell, channels, cell["batch_size"] * cell["local_devices"]))
    for _, labels in batches:
        yield int(labels.shape[0])
