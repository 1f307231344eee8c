"""The device of one PyTorch process: which it is, its name, its memory and the versions of the
libraries that drive it."""

from __future__ import annotations

from scaling.workers import common


def claim(torch, cell: dict, local_rank: int):
    """Give torch the cell's threads per device, and return this process's device: the GPU of
    its local rank, made the current one, or the CPU. In a shared tree, the GPU's cached blocks
    of the last cell go back and its peak starts afresh."""
    torch.set_num_threads(cell["threads_per_device"])
    if cell["device_type"] == "gpu":
        torch.cuda.set_device(local_rank)
        if cell.get("shared_tree"):
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def device_name(torch, device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def versions(torch, device) -> dict:
    found = {"torch": torch.__version__, "cuda": torch.version.cuda}
    if device.type == "cuda":
        found["cudnn"] = torch.backends.cudnn.version()
        found["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    return found


def memory(torch, device) -> dict:
    """Peak memory, and the peak and capacity of the memory that OOM is decided on."""
    if device.type != "cuda":
        return {"peak_memory_bytes": common.peak_rss_bytes(), **common.cpu_memory_headroom()}
    # The allocated peak is the demand, which grows with the batch up to the limit; the
    # reserved peak stops growing near it (the allocator frees its cache and retries).
    cuda = torch.cuda
    free, _ = cuda.mem_get_info(device)
    peak = cuda.max_memory_allocated(device)
    return {"peak_memory_bytes": peak, "capped_memory_peak_bytes": peak,
            "memory_capacity_bytes": free + cuda.memory_reserved(device)}
