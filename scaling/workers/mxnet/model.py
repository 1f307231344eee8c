"""The model of one MXNet process: the hybridized network on every context, its data-parallel
trainer and loss, and ``mxnet.contrib.amp``."""

from __future__ import annotations

from scaling.workers.mxnet.device import cpu_has_bf16


def init_amp(cell: dict):
    """``mxnet.contrib.amp`` initialised for the cell's device, or None without ``amp``."""
    if not cell["options"].get("amp"):
        return None
    gpu = cell["device_type"] == "gpu"
    if not gpu and not cpu_has_bf16():
        raise RuntimeError("MXNet amp on CPU runs bfloat16 oneDNN kernels, which need a "
                           "CPU with AVX512-BF16 or AMX-BF16; this one has neither")
    from mxnet.contrib import amp

    amp.init(target_dtype="float16" if gpu else "bfloat16")
    return amp


def build_model(mx, gluon, cell: dict, workload, contexts: list, parallel, amp):
    """The hybridized network on every context, its data-parallel trainer (made ready for
    ``amp`` where it is on) and the loss: ``(net, trainer, loss_fn)``."""
    net = workload.builder(cell["models"])(cell["image_size"], workload.classes)
    net.initialize(mx.init.Xavier(), ctx=contexts)
    net.hybridize(static_alloc=True, static_shape=True)
    optimizer_params = ({"learning_rate": 0.001} if workload.optimizer == "adam"
                        else {"learning_rate": 0.01, "momentum": 0.9})
    trainer = parallel.trainer(gluon, net.collect_params(), workload.optimizer,
                               optimizer_params)
    if amp:
        amp.init_trainer(trainer)
    return net, trainer, gluon.loss.SoftmaxCrossEntropyLoss()
