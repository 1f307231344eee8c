"""The devices of one MXNet process: its contexts, their memory, and whether the CPU runs
bfloat16 kernels."""

from __future__ import annotations

from scaling.workers import common


def cpu_has_bf16() -> bool:
    with open("/proc/cpuinfo") as cpuinfo:
        flags = next((line.split(":", 1)[1].split() for line in cpuinfo
                      if line.startswith("flags")), [])
    return "avx512_bf16" in flags or "amx_bf16" in flags


def contexts(mx, cell: dict, first_gpu: int) -> list:
    """The process's ``local_devices`` contexts: GPUs from ``first_gpu`` on, or CPU contexts."""
    return [mx.gpu(first_gpu + index) if cell["device_type"] == "gpu" else mx.cpu(index)
            for index in range(cell["local_devices"])]


def memory(mx, contexts: list, gpu: bool) -> dict:
    """Peak memory, and the peak and capacity of the memory that OOM is decided on."""
    if not gpu:
        return {"peak_memory_bytes": common.peak_rss_bytes(), **common.cpu_memory_headroom()}
    # The pooled GPU allocator keeps what it has allocated, so use at the end is the peak.
    info = [mx.context.gpu_memory_info(context.device_id) for context in contexts]
    used = max(total - free for free, total in info)
    return {"peak_memory_bytes": used, "capped_memory_peak_bytes": used,
            "memory_capacity_bytes": min(total for _, total in info)}
