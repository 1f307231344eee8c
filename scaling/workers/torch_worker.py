"""One DistributedDataParallel rank, started by torchrun: ``python -m scaling.workers.torch_worker CELL_DIR``.

Synthetic data is made once on the device. Warm-up steps run first; the timed window starts after
a device synchronization and a barrier, and ends with a synchronization on every rank, followed by
a barrier. Each rank reports its own start and end wall times; the harness divides the global
image count by (latest end - earliest start).
"""

from __future__ import annotations

import os
import sys
import time

from scaling.workers import common


class TorchDevice:
    """The only device-specific code: placement, synchronization, step timing and peak memory."""

    def __init__(self, torch, device_type: str, local_rank: int):
        self.torch = torch
        self.is_gpu = device_type == "gpu"
        if self.is_gpu:
            torch.cuda.set_device(local_rank)
            self.device = torch.device("cuda", local_rank)
        else:
            self.device = torch.device("cpu")
        self.backend = "nccl" if self.is_gpu else "gloo"

    def synchronize(self) -> None:
        if self.is_gpu:
            self.torch.cuda.synchronize(self.device)

    def step_timer(self):
        return _CudaEventTimer(self.torch) if self.is_gpu else _WallTimer()

    def peak_memory_bytes(self) -> int:
        if self.is_gpu:
            return self.torch.cuda.max_memory_allocated(self.device)
        return common.peak_rss_bytes()

    def memory_headroom(self) -> dict:
        """Peak of the memory that OOM is decided on, and how much of it the rank could have."""
        if not self.is_gpu:
            return common.cpu_memory_headroom()
        free, _ = self.torch.cuda.mem_get_info(self.device)
        reserved = self.torch.cuda.memory_reserved(self.device)
        return {"capped_memory_peak_bytes": self.torch.cuda.max_memory_reserved(self.device),
                "memory_capacity_bytes": free + reserved}

    def describe(self) -> str:
        if self.is_gpu:
            return self.torch.cuda.get_device_name(self.device)
        return "cpu"

    def versions(self) -> dict:
        torch = self.torch
        versions = {"torch": torch.__version__, "cuda": torch.version.cuda}
        if self.is_gpu:
            versions["cudnn"] = torch.backends.cudnn.version()
            versions["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        return versions


class _WallTimer:
    """Step times on CPU, where every operation has finished when it returns."""

    def __init__(self):
        self.marks = []

    def mark(self) -> None:
        self.marks.append(time.perf_counter())

    def step_times(self):
        return [b - a for a, b in zip(self.marks, self.marks[1:])]


class _CudaEventTimer:
    """Step times from CUDA events, so timing adds no host synchronization inside the window."""

    def __init__(self, torch):
        self.torch = torch
        self.events = []

    def mark(self) -> None:
        event = self.torch.cuda.Event(enable_timing=True)
        event.record()
        self.events.append(event)

    def step_times(self):
        return [a.elapsed_time(b) / 1000.0 for a, b in zip(self.events, self.events[1:])]


def train(cell: dict, report: dict, rank: int, local_rank: int, world_size: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from workloads import get_workload

    torch.set_num_threads(cell["threads_per_device"])
    device = TorchDevice(torch, cell["device_type"], local_rank)
    report.update(versions=device.versions(), device_name=device.describe(), layout="NCHW")
    dist.init_process_group(backend=device.backend)
    faults = common.FaultInjector(rank)

    workload = get_workload(cell["workload"])
    model = workload.builder("torch")(cell["image_size"], workload.classes).to(device.device)
    report["params"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if device.is_gpu else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    size, batch = cell["image_size"], cell["batch_size"]
    images = torch.randn(batch, 3, size, size, device=device.device)
    labels = torch.randint(0, workload.classes, (batch,), device=device.device)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss_fn(ddp(images), labels).backward()
        optimizer.step()

    for index in range(cell["warmup"]):
        faults.at_step(index)
        step()
    device.synchronize()
    dist.barrier()
    timer = device.step_timer()
    start = time.time()
    timer.mark()
    for index in range(cell["steps"]):
        faults.at_step(cell["warmup"] + index)
        step()
        timer.mark()
    device.synchronize()
    end = time.time()
    dist.barrier()
    times = common.step_time_summary(timer.step_times())
    report.update(
        start=start, end=end, images=batch * cell["steps"],
        step_time_median_s=times["median"], step_time_p95_s=times["p95"],
        peak_memory_bytes=device.peak_memory_bytes(), world_size=world_size,
        **device.memory_headroom(),
    )
    dist.destroy_process_group()


def main() -> None:
    cell_dir = sys.argv[1]
    common.die_with_parent()
    cell = common.load_cell(cell_dir)
    common.apply_memory_limit(cell["memory_limit"])
    rank = int(os.environ["RANK"])
    with common.reporting(cell_dir, rank) as report:
        train(cell, report, rank, int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"]))


if __name__ == "__main__":
    main()
