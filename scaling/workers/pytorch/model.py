"""The model of one PyTorch process: the network on its device with its optimizer and loss, and
the precision that autocast runs it in."""

from __future__ import annotations


def amp_dtype(torch, amp, is_gpu: bool):
    """The autocast dtype of the option ``amp``: None when it is off; true picks fp16 on GPU
    and bf16 on CPU; ``fp16`` or ``bf16`` choose."""
    if amp is False:
        return None
    if amp is True:
        return torch.float16 if is_gpu else torch.bfloat16
    return {"fp16": torch.float16, "bf16": torch.bfloat16}[amp]


def build_model(torch, cell: dict, workload, device, memory_format, parallel):
    """The model and its optimizer, wrapped for data parallelism unless the mode only runs
    forward, and the loss: ``(model, optimizer, loss_fn, params)``, ``params`` the trainable
    parameter count. On CPU with ``profile`` on, the mechanism times the communication that the
    trace cannot see (``time_exposure``) where it can."""
    model = workload.builder(cell["models"])(cell["image_size"], workload.classes).to(
        device, memory_format=memory_format)
    optimizer = (torch.optim.Adam(model.parameters(), lr=0.001)
                 if workload.optimizer == "adam"
                 else torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9))
    is_gpu = device.type == "cuda"
    if cell["mode"] == "forward":
        wrapped, optimizer = model.eval(), optimizer
    else:
        wrapped, optimizer = parallel.wrap(model, optimizer, [device.index] if is_gpu else None)
        if cell["profile"] and not is_gpu and hasattr(parallel, "time_exposure"):
            parallel.time_exposure(wrapped)
    return (wrapped, optimizer, torch.nn.CrossEntropyLoss(),
            sum(p.numel() for p in model.parameters() if p.requires_grad))
