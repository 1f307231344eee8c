"""Real images for a cell with ``data``: what every framework's input pipeline shares.

A data folder is an ImageFolder tree, ``DIR/train/<class>/<n>.jpg`` (``scaling make-data``
writes one). Each process of a cell reads its own shard of the files, cut by the framework's
own tool: torch's ``DistributedSampler``, Gluon's ``Dataset.shard``, and for tf.data
:func:`shard_files` (every ``count``-th file from the process's index on). Every framework applies the same augmentation with
its own standard pipeline: a random resized crop to the cell's image size, a horizontal flip,
and normalisation by the ImageNet mean and deviation (grey images: their mean). A window longer
than a shard goes round it again (:func:`endless`).

Standard library only, so that it runs under every framework's interpreter.
"""

from __future__ import annotations

import os
import socket
from typing import Callable, Dict, Iterable, Iterator, List, Tuple

from scaling.workers import common

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
SUFFIXES = (".jpg", ".jpeg")


def normalisation(channels: int) -> Tuple[Tuple[float, ...], Tuple[float, ...]]:
    """(mean, deviation) per channel: ImageNet's for colour, their means for one channel."""
    if channels == 1:
        return (sum(MEAN) / 3,), (sum(STD) / 3,)
    return MEAN, STD


def train_dir(data: str) -> str:
    return os.path.join(data, "train")


def check_data_dir(data: str) -> List[str]:
    """The class folders of ``data``'s training tree, sorted, once it is readable here and
    holds JPEG files; otherwise a one-line error that names the node (Slurm's name for it
    under Slurm), raised before any training starts."""
    where = f"on {os.environ.get('SLURMD_NODENAME') or socket.gethostname()}"
    root = train_dir(data)
    if not os.path.isdir(root) or not os.access(root, os.R_OK | os.X_OK):
        raise RuntimeError(f"data folder {data} is not readable {where}: no readable "
                           f"{root}/<class>/ tree")
    classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
    if not any(name.lower().endswith(SUFFIXES) for label in classes
               for name in os.listdir(os.path.join(root, label))):
        raise RuntimeError(f"data folder {data} has no train/<class>/*.jpg files {where}")
    return classes


def shard_files(data: str, shard: int, count: int) -> List[Tuple[str, int]]:
    """(path, class index) of every ``count``-th JPEG of ``data`` from the ``shard``-th on, in
    sorted order: this process's own part of the dataset."""
    classes = check_data_dir(data)
    files = [(os.path.join(train_dir(data), label, name), index)
             for index, label in enumerate(classes)
             for name in sorted(os.listdir(os.path.join(train_dir(data), label)))
             if name.lower().endswith(SUFFIXES)]
    shard_of = files[shard::count]
    if not shard_of:
        raise RuntimeError(f"data folder {data} has {len(files)} images, too few for "
                           f"{count} processes to read one each")
    return shard_of


def process_shard(cell: Dict) -> List[Tuple[str, int]]:
    """:func:`shard_files` of this process of ``cell`` (by its rank among the cell's
    processes), refused when it holds fewer images than one batch: a pipeline that keeps full
    batches only would otherwise wait without end."""
    rank, _, processes = common.process_ranks()
    files = shard_files(cell["data"], rank, processes)
    if len(files) < cell["batch_size"]:
        raise RuntimeError(f"this process's shard of the data has {len(files)} images: the "
                           f"shard holds fewer images than one batch ({cell['batch_size']})")
    return files


def endless(epoch: Callable[[int], Iterable]) -> Iterator:
    """The items of ``epoch(0)``, then of ``epoch(1)``, and so on: a pass that ends starts the
    next one (a loader's sampler gets its epoch). A pass without a single item is an error:
    the shard holds less than one full batch."""
    number = 0
    while True:
        empty = True
        for item in epoch(number):
            empty = False
            yield item
        if empty:
            raise RuntimeError("a whole pass over this process's shard of the data gave no "
                               "batch: the shard holds fewer images than one batch")
        number += 1
