"""Real images into an MXNet process: Gluon's ``ImageFolderDataset`` through a ``DataLoader``.

The process reads its own shard (``Dataset.shard``: one of as many contiguous parts of the
sorted files as the cell has processes, a kvstore process driving all of its contexts, a Horovod
rank one), shuffled by numpy's generator seeded with the process's rank when the loader is
made, in batches of ``batch_size`` images per context with every batch full. The augmentation
is ``scaling.workers.input_data``'s, in Gluon's transforms, decoded in one channel for grey
workloads. ``loader_workers`` N > 0 is the loader's worker processes; 0 loads in the training
process. On GPUs the batches land in pinned memory.
"""

from __future__ import annotations

from typing import Iterator

from scaling.workers import common, input_data


def data_loader(cell: dict, channels: int, contexts: int, first_gpu: int = 0):
    """The cell's loader for this process: its shard, a batch for each of its ``contexts``,
    and its workers."""
    import numpy
    from mxnet import gluon
    from mxnet.gluon.data.vision import transforms

    mean, std = input_data.normalisation(channels)
    augment = transforms.Compose([
        transforms.RandomResizedCrop(cell["image_size"]), transforms.RandomFlipLeftRight(),
        transforms.ToTensor(), transforms.Normalize(mean, std)])
    dataset = gluon.data.vision.ImageFolderDataset(input_data.train_dir(cell["data"]),
                                                   flag=0 if channels == 1 else 1)
    rank, _, processes = common.process_ranks()
    numpy.random.seed(rank)
    return gluon.data.DataLoader(
        dataset.shard(processes, rank).transform_first(augment),
        batch_size=cell["batch_size"] * contexts, shuffle=True, last_batch="discard",
        num_workers=cell["loader_workers"], pin_memory=cell["device_type"] == "gpu",
        pin_device_id=first_gpu)


def context_batches(loader, contexts) -> Iterator:
    """(images, labels), each a list with one part per context, without end; labels in
    float32."""
    from mxnet import gluon

    def epoch(number: int):
        for images, labels in loader:
            yield (gluon.utils.split_and_load(images, contexts),
                   gluon.utils.split_and_load(labels.astype("float32"), contexts))

    return input_data.endless(epoch)


def image_counts(loader) -> Iterator[int]:
    """The image count of each batch of ``loader``, without end and without a model."""
    return input_data.endless(lambda number: (len(labels) for _, labels in loader))
