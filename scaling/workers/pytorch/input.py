"""Real images into a torch process: torchvision's ``ImageFolder`` through a ``DataLoader``.

The process reads its own shard through a ``DistributedSampler`` (one replica per process of
the cell), with ``loader_workers`` worker processes, pinned memory on GPUs, and every batch
full. The augmentation is ``scaling.workers.input_data``'s, in torchvision's transforms.
"""

from __future__ import annotations

from typing import Iterator

from scaling.workers import common, input_data


def data_loader(cell: dict, channels: int):
    """The cell's loader for this process: its shard, batch and workers."""
    import torch
    from torchvision import datasets, transforms

    mean, std = input_data.normalisation(channels)
    steps = [transforms.RandomResizedCrop(cell["image_size"], antialias=True),
             transforms.RandomHorizontalFlip(), transforms.ToTensor(),
             transforms.Normalize(mean, std)]
    if channels == 1:
        steps.insert(0, transforms.Grayscale())
    dataset = datasets.ImageFolder(input_data.train_dir(cell["data"]),
                                   transform=transforms.Compose(steps))
    rank, _, processes = common.process_ranks()
    sampler = torch.utils.data.DistributedSampler(dataset, num_replicas=processes, rank=rank,
                                                  shuffle=True, seed=0)
    workers = cell["loader_workers"]
    return torch.utils.data.DataLoader(
        dataset, batch_size=cell["batch_size"], sampler=sampler, num_workers=workers,
        pin_memory=cell["device_type"] == "gpu", drop_last=True,
        persistent_workers=workers > 0, prefetch_factor=2 if workers else None)


def device_batches(loader, device, memory_format) -> Iterator:
    """(images, labels) on ``device`` without end: each pass over the shard sets the sampler's
    epoch and goes again."""
    def epoch(number: int):
        loader.sampler.set_epoch(number)
        for images, labels in loader:
            yield (images.to(device, non_blocking=True, memory_format=memory_format),
                   labels.to(device, non_blocking=True))

    return input_data.endless(epoch)


def image_counts(loader) -> Iterator[int]:
    """The image count of each batch of ``loader``, without end and without a model."""
    def epoch(number: int):
        loader.sampler.set_epoch(number)
        return (len(labels) for _, labels in loader)

    return input_data.endless(epoch)
