"""What a TensorFlow process sets up on its devices before TensorFlow initialises, and the facts
its rank report gives about them: memory, versions, device name."""

from __future__ import annotations

import os

from scaling.workers import common


def thread_pools(cell: dict, local_devices: int):
    """(intra-op, inter-op) threads of a process driving ``local_devices`` devices.

    A CPU device of N threads uses at most N cores, as in the other frameworks. TensorFlow runs
    each op on an inter-op thread, which shares the op's work out to the intra-op pool (a pool
    of one runs it inline). Two inter-op threads ran two ops at once, so a device of one thread
    used 1.4-1.6 cores; here each device has one inter-op thread (one op in flight), and the
    pool N x devices threads, or one at N = 1, where the devices' inter-op threads do all the
    work inline (a pool of more would run beside them). Under a memory cap ops run one at a
    time, over the whole pool, so that the peak, and so OOM, is repeatable. GPUs keep two
    inter-op threads or more: there they launch kernels rather than compute.
    """
    threads = cell["threads_per_device"]
    if cell["device_type"] == "gpu":
        return threads * local_devices, max(2, local_devices)
    inter = 1 if cell["memory_limit"] else local_devices
    return (1 if threads == 1 and inter > 1 else threads * local_devices), inter


def configure_devices(tf, cell: dict, local_devices: int, first_gpu: int):
    """Create the logical devices (before TensorFlow initialises) and return their names: the
    ``local_devices`` GPUs from the machine's ``first_gpu`` on, or as many logical CPU devices."""
    intra, inter = thread_pools(cell, local_devices)
    tf.config.threading.set_intra_op_parallelism_threads(intra)
    tf.config.threading.set_inter_op_parallelism_threads(inter)
    if cell["device_type"] == "gpu":
        gpus = tf.config.list_physical_devices("GPU")[first_gpu:first_gpu + local_devices]
        tf.config.set_visible_devices(gpus, "GPU")
        return [f"/gpu:{index}" for index in range(len(gpus))]
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(local_devices)])
    return [f"/cpu:{index}" for index in range(local_devices)]


def cap_cpu_allocator(cell: dict, local_devices: int) -> None:
    """The CPU memory cap for TensorFlow, set before it is imported.

    Under an RLIMIT, TensorFlow aborts on std::bad_alloc instead of raising, and with oneDNN's
    allocator capped, oneDNN kernels can crash (SIGSEGV) when it runs out. TensorFlow's own BFC
    CPU allocator takes a limit and raises ResourceExhaustedError, as on a GPU, so a capped cell
    runs on it, without oneDNN. The process's logical devices share it: the limit is the cap
    times their number.
    """
    if cell["memory_limit"]:
        os.environ.update(
            TF_ENABLE_ONEDNN_OPTS="0", TF_CPU_ALLOCATOR_USE_BFC="true",
            TF_CPU_BFC_MEM_LIMIT_IN_MB=str(cell["memory_limit"] * local_devices // 2**20))


def refuse_unrunnable_options(cell: dict) -> None:
    if cell["options"].get("xla") and cell["options"].get("mixed_precision") \
            and cell["device_type"] == "cpu":
        raise RuntimeError(
            "xla and mixed_precision together do not run on CPU: XLA's CPU compiler refuses "
            "the mixed float16/float32 ops of mixed_float16 ('Seen floating point types of "
            "different precisions ... but mixed precision is disallowed'); use one of them")


def gpu_memory_totals(first_gpu: int, count: int) -> list:
    """Total memory of the machine's GPUs ``first_gpu`` on, in bytes; empty without NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return [pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(index)).total
                for index in range(first_gpu, first_gpu + count)]
    except Exception:  # no library, no driver, no such device: the capacity is unknown
        return []


def memory_report(tf, cell: dict, devices, first_gpu: int) -> dict:
    if cell["device_type"] != "gpu":
        peak_rss = common.peak_rss_bytes()
        if not cell["memory_limit"]:
            # Without a cap TensorFlow may use an allocator that keeps no statistics.
            return {"peak_memory_bytes": peak_rss, "capped_memory_peak_bytes": peak_rss,
                    "memory_capacity_bytes": None}
        return {"peak_memory_bytes": peak_rss,
                "capped_memory_peak_bytes": tf.config.experimental.get_memory_info("CPU:0")["peak"],
                "memory_capacity_bytes": int(os.environ["TF_CPU_BFC_MEM_LIMIT_IN_MB"]) * 2**20}
    peaks = [tf.config.experimental.get_memory_info(name.lstrip("/").upper())["peak"]
             for name in devices]
    totals = gpu_memory_totals(first_gpu, len(devices))
    return {"peak_memory_bytes": max(peaks), "capped_memory_peak_bytes": max(peaks),
            "memory_capacity_bytes": min(totals) if totals else None}


BESIDE = {
    "multiworker": "the collective executor's threads (collective_ops: the ring's reductions) "
                   "and gRPC's (event_engine) carry the allreduce beside the compute threads",
    "horovod": "Horovod's background thread carries the allreduce beside the compute threads",
}
"""Threads that TensorFlow runs beyond threads_per_device x local devices, by data_parallel."""


def threads_report(tf, cell: dict) -> dict:
    """The thread pools in effect, and what runs beside them (null: nothing that computes)."""
    beside = BESIDE.get(cell["data_parallel"]) if cell["device_type"] == "cpu" else None
    if cell["device_type"] == "cpu" and cell["data"]:
        beside = "; ".join(filter(None, [beside, "tf.data's private pool of max(1, "
                                         "loader_workers) threads decodes beside them"]))
    return {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op": tf.config.threading.get_inter_op_parallelism_threads(),
            "beside": beside}


def description(tf, keras, cell: dict, parallel, strategy, model, devices) -> dict:
    """What the rank report says about the model, its devices and its software."""
    build = tf.sysconfig.get_build_info()
    return dict(
        params=sum(int(tf.size(v)) for v in model.trainable_variables),
        versions={"tensorflow": tf.__version__, "keras": keras.__version__,
                  **parallel.versions(),
                  **{k: v for k, v in build.items() if k in ("cuda_version", "cudnn_version")}},
        device_name=devices[0] if cell["device_type"] == "cpu"
        else tf.config.experimental.get_device_details(
            tf.config.list_physical_devices("GPU")[parallel.first_gpu]
        ).get("device_name", "gpu"),
        layout="NHWC", local_devices=cell["local_devices"],
        replicas=parallel.replicas(strategy),
        threads=threads_report(tf, cell),
        xla=bool(cell["options"].get("xla")),
        mixed_precision=bool(cell["options"].get("mixed_precision")),
    )
