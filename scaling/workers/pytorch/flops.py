"""The FLOPs of one image of a PyTorch model in the cell's mode, as torch's ``FlopCounterMode``
counts them (the rules ``scaling.workers.compute`` describes, which the other frameworks'
counters follow)."""

from __future__ import annotations


def flops_per_image(models: str, workload, image_size: int, mode: str) -> float:
    """torch.utils.flop_counter's count for ``workload``, on the meta device: nothing is
    computed, so the count costs no device time and no memory."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    batch = 2  # BatchNorm in training mode needs more than one value per channel
    with torch.device("meta"):
        model = workload.builder(models)(image_size, workload.classes)
        images = torch.empty(batch, workload.channels, image_size, image_size)
    with FlopCounterMode(display=False) as counter:
        if mode == "forward":
            model.eval()(images)
        else:
            model(images).sum().backward()
    return counter.get_total_flops() / batch
