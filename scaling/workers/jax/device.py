"""A JAX process's memory cap, set before JAX is imported, and the facts its rank report gives
about its memory and its software."""

from __future__ import annotations

from scaling.workers import common


def cap_memory(cell: dict) -> None:
    """The cell's per-device CPU memory cap, times this process's devices, on its heap
    (before JAX is imported)."""
    if cell["memory_limit"] and cell["device_type"] == "cpu":
        common.apply_memory_limit(cell["memory_limit"] * cell["local_devices"])


def memory_report(cell: dict, parallel) -> dict:
    """Peak memory, and the peak and capacity of the memory that OOM is decided on: the
    heap under the CPU cap, or the first device's allocator on a GPU."""
    if cell["device_type"] == "cpu":
        return {"peak_memory_bytes": common.peak_rss_bytes(), **common.cpu_memory_headroom()}
    stats = parallel.local_devices[0].memory_stats()
    return {"peak_memory_bytes": stats["peak_bytes_in_use"],
            "capped_memory_peak_bytes": stats["peak_bytes_in_use"],
            "memory_capacity_bytes": stats["bytes_limit"]}


def versions(jax) -> dict:
    import flax
    import jaxlib
    import optax

    return {"jax": jax.__version__, "jaxlib": jaxlib.__version__,
            "flax": flax.__version__, "optax": optax.__version__}
