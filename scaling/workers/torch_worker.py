"""One PyTorch process: ``python -m scaling.workers.torch_worker CELL_DIR``.

Started by a launcher that sets the process's ranks (torchrun, or horovodrun). The cell's
``data_parallel`` picks the mechanism: ``ddp`` (DistributedDataParallel over gloo on CPU and NCCL
on GPU) or ``horovod`` (``hvd.DistributedOptimizer`` after a broadcast of the parameters and the
optimizer state; NCCL on GPU where the build has it, gloo otherwise). Synthetic data is made once
on the device. Step times on GPU come from CUDA events, so timing adds no host synchronization
inside the window.

Options: ``amp`` (autocast: true picks bf16 on CPU and fp16 with a gradient scaler on GPU;
``fp16`` or ``bf16`` choose), ``channels_last`` (model and data in NHWC memory format),
``compile`` (torch.compile, compiled by one untimed step before the warm-up) and
``cudnn_benchmark``. Modes: ``train``; ``forward`` (inference mode, no gradient, no
data-parallel wrapper); ``forward_backward`` (loss and backward, whose gradients DDP or Horovod
aggregate, no optimizer step). The batch is seeded by the rank, so every replica's differs.
"""

from __future__ import annotations

import copy
import time

from scaling.workers import common, torch_input
from scaling.workers.compute import compute_report, torch_flops_per_image
from scaling.workers.loop import run_worker
from scaling.workers.torch_parallel import PARALLEL


class _CudaEventTimer:
    def __init__(self, torch):
        self.torch = torch
        self.events = []

    def mark(self) -> None:
        event = self.torch.cuda.Event(enable_timing=True)
        event.record()
        self.events.append(event)

    def step_times(self):
        return [a.elapsed_time(b) / 1000.0 for a, b in zip(self.events, self.events[1:])]




class TorchSession:
    """A data-parallel model, its optimizer and one synthetic batch on this rank's device."""

    def __init__(self, cell: dict, report: dict, local_rank: int, world_size: int):
        import torch

        from workloads import get_workload

        self.torch, self.mode = torch, cell["mode"]
        options = cell["options"]
        torch.set_num_threads(cell["threads_per_device"])
        self.is_gpu = cell["device_type"] == "gpu"
        if self.is_gpu:
            torch.cuda.set_device(local_rank)
            self.device = torch.device("cuda", local_rank)
        else:
            self.device = torch.device("cpu")
        torch.backends.cudnn.benchmark = bool(options.get("cudnn_benchmark"))
        self.amp_dtype = self._amp_dtype(options.get("amp", False))
        self.scaler = (torch.amp.GradScaler(self.device.type)
                       if self.amp_dtype == torch.float16 and self.mode != "forward" else None)
        self.memory_format = (torch.channels_last if options.get("channels_last")
                              else torch.contiguous_format)
        report.update(versions=self._versions(), device_name=self._device_name(),
                      layout="NHWC" if options.get("channels_last") else "NCHW",
                      world_size=world_size,
                      amp_dtype=str(self.amp_dtype).replace("torch.", "") if self.amp_dtype
                      else None)
        self.parallel = PARALLEL[cell["data_parallel"]](self.is_gpu)
        report["versions"].update(self.parallel.versions)
        workload = get_workload(cell["workload"])
        report["params"] = self._build_model(cell, workload, local_rank)
        self.gradient_bytes = sum(p.numel() * p.element_size() for p in self.model.parameters()
                                  if p.requires_grad)
        report.update(compute_report(
            cell, {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[self.amp_dtype],
            lambda: torch_flops_per_image(cell["models"], workload, cell["image_size"],
                                          self.mode), self.gradient_bytes))
        self.cell, self.workload, self.batches = cell, workload, None
        self.local_model = None
        if cell["data"]:
            self.batches = torch_input.device_batches(
                torch_input.data_loader(cell, workload.channels), self.device,
                self.memory_format)
            self.images_per_step = cell["batch_size"]
        else:
            self.use_synthetic()
        if options.get("compile"):
            report["compile_s"] = self._compile()

    def _build_model(self, cell: dict, workload, local_rank: int) -> int:
        """The model and its optimizer, wrapped for data parallelism unless the mode only runs
        forward; returns the trainable parameter count."""
        torch = self.torch
        model = workload.builder(cell["models"])(cell["image_size"], workload.classes).to(
            self.device, memory_format=self.memory_format)
        optimizer = (torch.optim.Adam(model.parameters(), lr=0.001)
                     if workload.optimizer == "adam"
                     else torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9))
        if self.mode == "forward":
            self.model, self.optimizer = model.eval(), optimizer
        else:
            self.model, self.optimizer = self.parallel.wrap(
                model, optimizer, [local_rank] if self.is_gpu else None)
            if cell["profile"] and not self.is_gpu and hasattr(self.parallel, "time_exposure"):
                self.parallel.time_exposure(self.model)
        self.loss_fn = torch.nn.CrossEntropyLoss()
        return sum(p.numel() for p in model.parameters() if p.requires_grad)

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

    def _compile(self) -> float:
        """torch.compile the model, compiling it with one untimed step; returns the seconds."""
        self.model = self.torch.compile(self.model)
        started = time.perf_counter()
        self.step()
        self.synchronize()
        return time.perf_counter() - started

    def _amp_dtype(self, amp):
        if amp is False:
            return None
        if amp is True:
            return self.torch.float16 if self.is_gpu else self.torch.bfloat16
        return {"fp16": self.torch.float16, "bf16": self.torch.bfloat16}[amp]

    def _autocast(self):
        return self.torch.autocast(self.device.type, dtype=self.amp_dtype,
                                   enabled=self.amp_dtype is not None)

    def step(self) -> None:
        images, labels = next(self.batches) if self.batches else (self.images, self.labels)
        if self.mode == "forward":
            with self.torch.inference_mode(), self._autocast():
                self.model(images)
            return
        self.optimizer.zero_grad()  # set_to_none, the default since torch 2.0
        with self._autocast():
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

    def local_steps(self, count: int) -> None:
        """``count`` forward and backward passes on this process's own copy of the model, with
        no hook, no gradient aggregated and no update."""
        if self.local_model is None:
            model = self.model
            for wrapper in ("_orig_mod", "module"):  # torch.compile's, then DDP's
                model = getattr(model, wrapper, model)
            self.local_model = copy.deepcopy(model)
        for _ in range(count):
            for parameter in self.local_model.parameters():
                parameter.grad = None
            with self._autocast():
                loss = self.loss_fn(self.local_model(self.images), self.labels)
            loss.backward()
        self.synchronize()

    def synchronize(self) -> None:
        if self.is_gpu:
            self.torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        self.parallel.barrier()

    def agree_max(self, value: int) -> int:
        return int(self.parallel.max(self.torch.tensor([value], device=self.device)).item())

    def profile(self, steps: int, path: str) -> bool:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.is_gpu else [])
        exposed = getattr(self.parallel, "exposed_s", None)
        self.exposed = []
        with profile(activities=activities) as profiler:
            started = time.perf_counter()
            for _ in range(steps):
                if exposed:
                    exposed()  # clears what earlier steps left
                self.step()
                if exposed:
                    self.exposed.append(exposed())
            self.synchronize()
            self.profiled_s = time.perf_counter() - started
        profiler.export_chrome_trace(path)
        return self.is_gpu

    def exposed_communication(self):
        """The share of the profiled steps that waited for the gradients' allreduce after the
        backward pass, as the mechanism timed it; None where it was not timed."""
        return sum(self.exposed) / self.profiled_s if self.exposed else None

    def collective(self) -> TorchCollective:
        """The allreduce of the mechanism that aggregates this session's gradients."""
        return TorchCollective(self.torch, self.parallel, self.device)

    def step_timer(self):
        """CUDA events on GPU; on CPU a step has finished when it returns, so chunk means do."""
        return _CudaEventTimer(self.torch) if self.is_gpu else None

    def finish(self) -> dict:
        report = {**self._memory(), "data_sums": [self.images.double().sum().item()]}
        if self.mode != "forward":
            # After backward, DDP and Horovod leave the aggregated gradients in .grad.
            report["gradient_sums"] = [sum(p.grad.double().sum().item()
                                           for p in self.model.parameters() if p.grad is not None)]
        self.parallel.finish()
        return report

    def _memory(self) -> dict:
        """Peak memory, and the peak and capacity of the memory that OOM is decided on."""
        if not self.is_gpu:
            return {"peak_memory_bytes": common.peak_rss_bytes(), **common.cpu_memory_headroom()}
        # The allocated peak is the demand, which grows with the batch up to the limit; the
        # reserved peak stops growing near it (the allocator frees its cache and retries).
        cuda = self.torch.cuda
        free, _ = cuda.mem_get_info(self.device)
        peak = cuda.max_memory_allocated(self.device)
        return {"peak_memory_bytes": peak, "capped_memory_peak_bytes": peak,
                "memory_capacity_bytes": free + cuda.memory_reserved(self.device)}

    def _device_name(self) -> str:
        return self.torch.cuda.get_device_name(self.device) if self.is_gpu else "cpu"

    def _versions(self) -> dict:
        torch = self.torch
        versions = {"torch": torch.__version__, "cuda": torch.version.cuda}
        if self.is_gpu:
            versions["cudnn"] = torch.backends.cudnn.version()
            versions["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        return versions


class TorchCollective:
    """The allreduce of a data-parallel mechanism (``scaling.workers.collective``):
    torch.distributed's (gloo on CPU, NCCL on GPU) or Horovod's, on one rank's device."""

    def __init__(self, torch, parallel, device):
        self.torch, self.parallel, self.device = torch, parallel, device
        self.devices = parallel.size()
        self.buffer = None

    def prepare(self, count: int) -> None:
        self.buffer = self.torch.ones(count, dtype=self.torch.float32, device=self.device)

    def allreduce(self) -> None:
        self.parallel.sum_in_place(self.buffer)

    def first_value(self) -> float:
        return self.buffer[0].item()

    def zero(self) -> None:
        self.buffer.zero_()

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        self.parallel.barrier()

    def finish(self) -> dict:
        self.parallel.finish()
        return {}


def build(cell: dict, report: dict, rank: int) -> TorchSession:
    _, local_rank, world_size = common.process_ranks()
    return TorchSession(cell, report, local_rank, world_size)


def collective(cell: dict, report: dict, rank: int) -> TorchCollective:
    """The collective alone, for a cell of purpose ``allreduce``."""
    import torch

    torch.set_num_threads(cell["threads_per_device"])
    is_gpu = cell["device_type"] == "gpu"
    local_rank = common.process_ranks()[1]
    if is_gpu:
        torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank) if is_gpu else torch.device("cpu")
    parallel = PARALLEL[cell["data_parallel"]](is_gpu)
    report.update(versions={"torch": torch.__version__, **parallel.versions},
                  device_name=torch.cuda.get_device_name(device) if is_gpu else "cpu")
    return TorchCollective(torch, parallel, device)


if __name__ == "__main__":
    run_worker(build, collective=collective)
