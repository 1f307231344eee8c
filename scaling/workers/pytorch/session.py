"""The session that the timed loop drives in one PyTorch process (``scaling.workers.loop``): a
data-parallel model, its optimizer and one batch on this rank's device."""

from __future__ import annotations

from scaling.workers import common
from scaling.workers.compute import compute_report
from scaling.workers.pytorch import device as torch_device
from scaling.workers.pytorch import input as torch_input
from scaling.workers.pytorch import parallel
from scaling.workers.pytorch.collective import TorchCollective
from scaling.workers.pytorch.flops import flops_per_image
from scaling.workers.pytorch.hooks import TorchHooks
from scaling.workers.pytorch.model import amp_dtype, build_model


class TorchSession(TorchHooks):
    """A data-parallel model, its optimizer and one synthetic batch on this rank's device."""

    def __init__(self, cell: dict, report: dict, local_rank: int, world_size: int):
        import torch

        from workloads import get_workload

        self.torch, self.mode = torch, cell["mode"]
        options = cell["options"]
        self.device = torch_device.claim(torch, cell, local_rank)
        self.is_gpu = self.device.type == "cuda"
        torch.backends.cudnn.benchmark = bool(options.get("cudnn_benchmark"))
        self.amp_dtype = amp_dtype(torch, options.get("amp", False), self.is_gpu)
        self.scaler = (torch.amp.GradScaler(self.device.type)
                       if self.amp_dtype == torch.float16 and self.mode != "forward" else None)
        self.memory_format = (torch.channels_last if options.get("channels_last")
                              else torch.contiguous_format)
        report.update(versions=torch_device.versions(torch, self.device),
                      device_name=torch_device.device_name(torch, self.device),
                      layout="NHWC" if options.get("channels_last") else "NCHW",
                      world_size=world_size,
                      amp_dtype=str(self.amp_dtype).replace("torch.", "") if self.amp_dtype
                      else None)
        self.parallel = parallel.mechanism(cell, self.is_gpu)
        report["versions"].update(self.parallel.versions)
        workload = get_workload(cell["workload"])
        self.model, self.optimizer, self.loss_fn, report["params"] = build_model(
            torch, cell, workload, self.device, self.memory_format, self.parallel)
        report["communication_in_effect"] = self.parallel.in_effect(self.model, self.optimizer)
        self.gradient_bytes = sum(p.numel() * p.element_size() for p in self.model.parameters()
                                  if p.requires_grad)
        report.update(compute_report(
            cell, {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[self.amp_dtype],
            lambda: flops_per_image(cell["models"], workload, cell["image_size"], self.mode),
            self.gradient_bytes))
        self.cell, self.workload, self.batches = cell, workload, None
        if cell["data"]:
            self.batches = torch_input.device_batches(
                torch_input.data_loader(cell, workload.channels), self.device,
                self.memory_format)
            self.images_per_step = cell["batch_size"]
        else:
            self.use_synthetic()
        if options.get("compile"):
            report["compile_s"] = self.compile_model()

    def use_synthetic(self) -> None:
        """From now on, every step trains on one synthetic batch on the device, seeded by the
        process's rank."""
        cell, workload = self.cell, self.workload
        size, batch = cell["image_size"], cell["batch_size"]
        seeded = self.torch.Generator(self.device).manual_seed(common.process_ranks()[0])
        self.images = self.torch.randn(batch, workload.channels, size, size, generator=seeded,
                                       device=self.device).to(memory_format=self.memory_format)
        self.labels = self.torch.randint(0, workload.classes, (batch,), generator=seeded,
                                         device=self.device)
        self.images_per_step, self.batches = batch, None

    def loader_alone(self):
        """A fresh loader of this process's shard, with the same workers: each batch's image
        count, without end."""
        return torch_input.image_counts(torch_input.data_loader(self.cell,
                                                                self.workload.channels))

    def autocast(self):
        return self.torch.autocast(self.device.type, dtype=self.amp_dtype,
                                   enabled=self.amp_dtype is not None)

    def step(self) -> None:
        images, labels = next(self.batches) if self.batches else (self.images, self.labels)
        if self.mode == "forward":
            with self.torch.inference_mode(), self.autocast():
                self.model(images)
            return
        self.optimizer.zero_grad()  # set_to_none, the default since torch 2.0
        with self.autocast():
            loss = self.loss_fn(self.model(images), labels)
        (self.scaler.scale(loss) if self.scaler else loss).backward()
        with self.parallel.gradients_reduced(self.optimizer):
            if self.mode != "train":
                return
            if self.scaler:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()

    def synchronize(self) -> None:
        if self.is_gpu:
            self.torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        self.parallel.barrier()

    def agree_max(self, value: int) -> int:
        return int(self.parallel.max(self.torch.tensor([value], device=self.device)).item())

    def collective(self) -> TorchCollective:
        """The allreduce of the mechanism that aggregates this session's gradients."""
        return TorchCollective(self.torch, self.parallel, self.device)

    def finish(self) -> dict:
        report = {**torch_device.memory(self.torch, self.device),
                  "data_sums": [self.images.double().sum().item()]}
        if self.mode != "forward":
            # After backward, DDP and Horovod leave the aggregated gradients in .grad.
            report["gradient_sums"] = [sum(p.grad.double().sum().item()
                                           for p in self.model.parameters() if p.grad is not None)]
        if not self.cell.get("shared_tree"):
            self.parallel.finish()
        return report


def build(cell: dict, report: dict, rank: int) -> TorchSession:
    _, local_rank, world_size = common.process_ranks()
    return TorchSession(cell, report, local_rank, world_size)
