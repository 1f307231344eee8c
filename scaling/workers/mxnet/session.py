"""The session that the timed loop drives in one MXNet process (``scaling.workers.loop``): a
hybridized Gluon model over the process's contexts, with a data-parallel Trainer."""

from __future__ import annotations

import numpy

from scaling.workers.compute import compute_report
from scaling.workers.mxnet import device as mxnet_device
from scaling.workers.mxnet import flops
from scaling.workers.mxnet import input as mxnet_input
from scaling.workers.mxnet.collective import MxnetCollective
from scaling.workers.mxnet.hooks import MxnetHooks
from scaling.workers.mxnet.model import build_model, init_amp
from scaling.workers.mxnet.parallel import PARALLEL


class MxnetSession(MxnetHooks):
    """A hybridized Gluon model over this process's contexts, with a data-parallel Trainer."""

    def __init__(self, cell: dict, report: dict):
        import mxnet as mx
        from mxnet import autograd, gluon

        from workloads import get_workload

        self.mx, self.autograd = mx, autograd
        self.mode = cell["mode"]
        self.gpu = cell["device_type"] == "gpu"
        self.amp = init_amp(cell)
        self.parallel = PARALLEL[cell["data_parallel"]](cell)
        self.contexts = mxnet_device.contexts(mx, cell, self.parallel.first_gpu)
        workload = get_workload(cell["workload"])
        self.images_per_step = cell["batch_size"] * len(self.contexts)
        self.net, self.trainer, self.loss_fn = build_model(
            mx, gluon, cell, workload, self.contexts, self.parallel, self.amp)
        self.cell, self.workload, self.batches = cell, workload, None
        if cell["data"]:
            self.batches = mxnet_input.context_batches(self._loader(), self.contexts)
        else:
            self.use_synthetic()
        report.update(
            versions={"mxnet": mx.__version__, "cuda": mx.runtime.Features().is_enabled("CUDA"),
                      **self.parallel.versions},
            device_name=str(self.contexts[0]), layout="NCHW", hybridized=True,
            kvstore=self.parallel.kvstore, contexts=len(self.contexts),
        )

    def _loader(self):
        """A fresh loader of this process's shard, a batch for each of its contexts."""
        return mxnet_input.data_loader(self.cell, self.workload.channels, len(self.contexts),
                                       self.parallel.first_gpu)

    def use_synthetic(self) -> None:
        """From now on, every step trains on one synthetic batch per context, seeded by its
        cell-wide replica index."""
        mx, self.images, self.labels = self.mx, [], []
        size, batch, workload = self.cell["image_size"], self.cell["batch_size"], self.workload
        for index, context in enumerate(self.contexts, start=self.parallel.first_replica):
            mx.random.seed(index, ctx=context)
            self.images.append(mx.nd.random.uniform(
                shape=(batch, workload.channels, size, size), ctx=context))
            self.labels.append(mx.nd.random.randint(
                0, workload.classes, shape=(batch,), ctx=context).astype("float32"))
        self.batches = None

    def loader_alone(self):
        """A fresh loader of this process's shard, with the same workers: each batch's image
        count, without end."""
        return mxnet_input.image_counts(self._loader())

    def step(self) -> None:
        images, labels = next(self.batches) if self.batches else (self.images, self.labels)
        if self.mode == "forward":
            for x in images:
                self.net(x)
            return
        with self.autograd.record():
            losses = [self.loss_fn(self.net(x), y) for x, y in zip(images, labels)]
            if self.amp:
                with self.amp.scale_loss(losses, self.trainer) as scaled:
                    losses = scaled
        self.autograd.backward(losses)
        if self.mode == "train":
            self.trainer.step(self.images_per_step)
        else:
            self.trainer.allreduce_grads()

    def synchronize(self) -> None:
        self.mx.nd.waitall()

    def barrier(self) -> None:
        """Under Horovod, a collective every rank joins; one kvstore process holds every
        context, so there is no other rank to wait for."""
        self.parallel.total(self.mx, 1.0)

    def agree_max(self, value: int) -> int:
        return int(self.parallel.maximum(self.mx, value))

    def _trained(self) -> list:
        return [p for p in self.net.collect_params().values() if p.grad_req != "null"]

    def fingerprints(self) -> dict:
        """Per context, the sum of its batch's images and, after a backward pass, of its
        gradients: aggregated in forward_backward, and in train where the contexts, not a
        kvstore, update."""
        sums = {"data_sums": [float(x.sum().asscalar()) for x in self.images]}
        if self.mode != "forward":
            trained = self._trained()
            sums["gradient_sums"] = [sum(float(p.grad(context).sum().asscalar())
                                         for p in trained) for context in self.contexts]
        return sums

    @property
    def gradient_bytes(self) -> int:
        """The bytes of one context's gradients (the parameters exist after the first step)."""
        trained = [p.data(self.contexts[0]) for p in self._trained()]
        return sum(data.size * numpy.dtype(data.dtype).itemsize for data in trained)

    def collective(self) -> MxnetCollective:
        """The allreduce of the mechanism that aggregates this session's gradients."""
        return MxnetCollective(self.mx, self.parallel, self.contexts)

    def compute_facts(self, cell: dict) -> dict:
        """FLOPs per image (counted on the network's symbol graph, as MXNet has no counter of
        its own: ``scaling.workers.mxnet.flops``), gradient bytes and precision; no matrix
        kernel for the ceiling."""
        precision = ("fp16" if self.gpu else "bf16") if self.amp else "fp32"
        size = cell["image_size"]
        return compute_report(
            cell, precision,
            lambda: flops.flops_per_image(self.mx, self.net,
                                          (self.workload.channels, size, size), self.mode),
            self.gradient_bytes)

    def finish(self) -> dict:
        params = sum(p.data(self.contexts[0]).size for p in self._trained())
        facts = {"params": params, **self.compute_facts(self.cell), **self.fingerprints()}
        facts["communication_in_effect"] = self.parallel.communication_in_effect(self.trainer)
        self.parallel.finish()
        return {**mxnet_device.memory(self.mx, self.contexts, self.gpu), **facts}


def build(cell: dict, report: dict, rank: int) -> MxnetSession:
    return MxnetSession(cell, report)
