"""The steps of ``bench/gpu_validation.py``: what each one runs through the real command line,
what it needs, how long it takes on one H100 or H200 (what it took there, rounded up, where it
ran; an estimate where it has not: ``tune``, ``allreduce``, ``tensorflow``, ``mxnet``), and which
figures it keeps from what it wrote."""

from __future__ import annotations

import csv
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

import yaml

from scaling.execute.fingerprint import read_fingerprints
from scaling.execute.preflight import read_preflight
from scaling.execute.store import ResultStore
from scaling.execute.wall import window_share
from scaling.launchers import default_python
from scaling.tune.result import read_tune

RESNET = {"workload": "resnet50", "image_size": 224}
TORCH_FAST = {"amp": True, "channels_last": True, "cudnn_benchmark": True}
"""PyTorch on its fast paths, as published ResNet-50 figures are measured."""
ROW_KEYS = ("framework", "launcher", "workload", "image_size", "batch_size", "total_devices",
            "loader_workers", "status", "error", "images_per_sec", "images_per_sec_low",
            "images_per_sec_high", "speedup", "efficiency", "parallel_overhead",
            "parallel_overhead_low", "parallel_overhead_high", "mfu", "peak_tflops",
            "achieved_tflops", "images_per_joule", "peak_memory_bytes", "input_bound",
            "loader_images_per_sec", "synthetic_images_per_sec", "noisy", "suspect")
"""The columns of a sweep's ``results.csv`` that a step keeps."""
RECORD_KEYS = ("framework", "launcher", "batch_size", "status", "error", "images_per_sec",
               "images_per_sec_ci95", "mfu", "peak_tflops", "peak_source", "achieved_tflops",
               "images_per_joule", "telemetry", "step_breakdown", "device_name", "versions",
               "fingerprint", "peak_memory_bytes", "memory_capacity_bytes")
"""The fields of a ``scaling run`` record that a step keeps."""
WALL_KEYS = ("launcher", "total_devices", "batch_size", "loader_workers", "repeat", "status",
             "references", "wall_breakdown")
"""The fields of a sweep's record that say where its wall time went."""

REFERENCES = {
    "H100": ("Lambda (lambdal/deeplearning-benchmark), ResNet-50 fp16 training on one H100 SXM5",
             2616.0),
    "H200": ("Lambda v2 tables, ResNet-50 mixed precision on one H200", 3079.0),
    "A100": ("NVIDIA DeepLearningExamples resnet50v1.5 (PyTorch), DGX A100, AMP, one GPU",
             2470.0),
    "V100": ("NVIDIA DeepLearningExamples resnet50v1.5 (PyTorch), DGX-1 V100, AMP, one GPU",
             1200.0),
}
"""Published ResNet-50 mixed-precision training images/sec on one GPU, by the GPU's name, as
the project's references digest them."""
MLPERF = {
    "H100": ("MLPerf Training v4.0, ResNet-50, 8 GPUs, MXNet with DALI, batch 400 per GPU: "
             "images/sec per GPU", 7160.0),
    "H200": ("MLPerf Training v4.0, ResNet-50, 8 GPUs, MXNet with DALI, batch 400 per GPU: "
             "images/sec per GPU", 7950.0),
}
"""Per-GPU figures of the MLPerf Training closed division (the time to train, turned into
images/sec per GPU), as the project's references digest them."""
MLPERF_DIFFERENCES = (
    "MXNet with fused kernels (NHWC, fused BatchNorm and ReLU), not PyTorch",
    "DALI decoding real ImageNet on the GPU; synthetic data here",
    "batch 400 per GPU over 8 GPUs, with LARS; one GPU here",
    "the submitters' tuned software stack and clocks",
)
REFERENCE_DIFFERENCES = (
    "synthetic data here, real ImageNet through DALI or a loader there",
    "this harness's batch sizes, steps and warm-up, not the publisher's",
    "the framework, CUDA and driver versions of this machine",
    "one process per GPU under torchrun, with its DDP wrapper even at one GPU",
)


PROBES = {
    "torch": ("single", "import torch; assert torch.cuda.is_available()"),
    "horovod": ("horovod", "import horovod.torch as hvd; assert hvd.nccl_built()"),
    "jax": ("jax", "import jax, flax, optax; assert jax.devices('gpu')"),
    "tensorflow": ("tf-mirrored",
                   "import tensorflow as tf; assert tf.config.list_physical_devices('GPU')"),
    "mxnet": ("mxnet-kvstore", "import mxnet as mx; assert mx.context.num_gpus() > 0"),
}
"""Each framework's check that it imports with CUDA, in the interpreter its launcher uses."""


def probe() -> Dict[str, bool]:
    """Which frameworks import with CUDA here."""
    found = {}
    for name, (launcher, code) in PROBES.items():
        framework = "torch" if name == "horovod" else name
        python = default_python(framework, launcher)
        try:
            found[name] = subprocess.run([python, "-c", code], capture_output=True,
                                         timeout=300).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            found[name] = False
    return found


@dataclass
class Context:
    """What the commands are built from: the run's folder, the GPUs, the frameworks that
    import, and the wheels to install."""
    out: Path
    gpus: int
    available: Dict[str, bool]
    wheels: Optional[Path] = None


def missing(*frameworks: str) -> Callable[[Context], Optional[str]]:
    def why(ctx: Context) -> Optional[str]:
        absent = [name for name in frameworks if not ctx.available.get(name)]
        return f"{', '.join(absent)} does not import with CUDA here" if absent else None
    return why


@dataclass
class Step:
    name: str
    what: str
    estimate_s: float
    commands: Callable[[Context], List[List[str]]]
    """Each command an argv; ``scaling`` first means the harness's command line."""
    summary: Callable[[Context], Dict]
    needs: Callable[[Context], Optional[str]] = missing("torch")
    """Why the step cannot run on this machine, or None (by default, it runs PyTorch)."""
    after: List[str] = field(default_factory=list)
    """Steps whose results this one reads."""


def folder(ctx: Context, name: str) -> Path:
    return ctx.out / name


def write_sweep(ctx: Context, name: str, **spec) -> Path:
    """The sweep file of step ``name`` in its folder, on the GPUs."""
    path = folder(ctx, name) / "sweep.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"name": name, "device_type": "gpu", "timeout_s": 900,
                                    **spec}))
    return path


def sweep_argv(path: Path) -> List[str]:
    return ["scaling", "sweep", str(path), "--out", str(path.parent / "out"), "--resume"]


def rows(ctx: Context, name: str) -> List[Dict]:
    """The step's sweep rows (``results.csv``), the kept columns of each."""
    table = folder(ctx, name) / "out" / "results.csv"
    if not table.exists():
        return []
    with table.open() as handle:
        return [{key: row.get(key) for key in ROW_KEYS} for row in csv.DictReader(handle)]


def records(out: Path, keys=RECORD_KEYS) -> List[Dict]:
    """The ``keys`` of every record in ``out``."""
    return [{key: record.get(key) for key in keys} for record in ResultStore(out).records()]


def device_counts(ctx: Context) -> List[int]:
    return sorted({1, ctx.gpus})


def install_commands(ctx: Context) -> List[List[str]]:
    wheels = sorted(str(path) for path in ctx.wheels.glob("*.whl")) if ctx.wheels else []
    pip = [["python", "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
            "--find-links", str(ctx.wheels), *wheels]] if wheels else []
    return [*pip, ["scaling", "devices"]]


def throughput_commands(ctx: Context) -> List[List[str]]:
    launchers = ["torchrun"] + (["horovod"] if ctx.available.get("horovod") else [])
    return [sweep_argv(write_sweep(
        ctx, "throughput", frameworks={"torch": {"launchers": launchers,
                                                 "options": TORCH_FAST}},
        workloads=[RESNET["workload"]], image_size=RESNET["image_size"],
        devices=device_counts(ctx), batch_sizes=[256], steps=50, warmup=10,
        min_time_s=10, repeats=2))]


def telemetry_commands(ctx: Context) -> List[List[str]]:
    options = [part for key, value in TORCH_FAST.items()
               for part in ("--option", f"{key}={str(value).lower()}")]
    return [["scaling", "run", "--workload", RESNET["workload"], "--image-size",
             str(RESNET["image_size"]), "--device-type", "gpu", "--batch-size", "256",
             *options, "--steps", "50", "--warmup", "10", "--min-time", "20", "--profile",
             "--out", str(folder(ctx, "telemetry"))]]


def allreduce_commands(ctx: Context) -> List[List[str]]:
    return [["scaling", "allreduce", "--devices", str(ctx.gpus), "--device-type", "gpu",
             "--sizes", "1MiB,16MiB,256MiB", "--out", str(folder(ctx, "allreduce"))]]


def real_data_commands(ctx: Context) -> List[List[str]]:
    data = folder(ctx, "real_data") / "images"
    return [["scaling", "make-data", str(data), "--images", "4096", "--size", "256"],
            sweep_argv(write_sweep(
                ctx, "real_data", frameworks={"torch": {"launchers": ["single"],
                                                        "options": TORCH_FAST}},
                single_baseline=False, workloads=[RESNET["workload"]],
                image_size=RESNET["image_size"], devices=[1], batch_sizes=[128], steps=30,
                warmup=5, min_time_s=10, data=str(data), loader_workers=[4, 12]))]


def framework_commands(name: str, framework: str, launcher: str, options: Dict,
                       batch: int) -> Callable[[Context], List[List[str]]]:
    def commands(ctx: Context) -> List[List[str]]:
        return [sweep_argv(write_sweep(
            ctx, name, frameworks={framework: {"launchers": [launcher], "options": options}},
            workloads=[RESNET["workload"]], image_size=RESNET["image_size"],
            devices=device_counts(ctx), batch_sizes=[batch], steps=30, warmup=10,
            min_time_s=10))]
    return commands


def maxbatch_commands(ctx: Context) -> List[List[str]]:
    options = [part for key in ("amp", "channels_last")
               for part in ("--option", f"{key}=true")]
    return [["scaling", "maxbatch", "--workload", RESNET["workload"], "--image-size",
             str(RESNET["image_size"]), "--device-type", "gpu", "--devices", "1", *options,
             "--min", "256", "--multiple-of", "64", "--out", str(folder(ctx, "maxbatch"))]]


def preflight_commands(ctx: Context) -> List[List[str]]:
    return [["scaling", "preflight", "--device-type", "gpu", "--repeats", "3",
             "--out", str(folder(ctx, "preflight"))]]


def tune_commands(ctx: Context) -> List[List[str]]:
    return [["scaling", "tune", "--workload", RESNET["workload"], "--image-size",
             str(RESNET["image_size"]), "--devices", str(ctx.gpus), "--framework", "torch",
             "--device-type", "gpu", "--budget", "4m", "--out", str(folder(ctx, "tune"))]]


def sweep_summary(name: str) -> Callable[[Context], Dict]:
    """The step's rows, and where each cell's wall time went (``wall_breakdown``) with the
    share of the step's cells' wall time inside their windows."""
    def summary(ctx: Context) -> Dict:
        found = ResultStore(folder(ctx, name) / "out").records() \
            if (folder(ctx, name) / "out").exists() else []
        return {"rows": rows(ctx, name),
                "wall": [{key: record.get(key) for key in WALL_KEYS} for record in found],
                "window_share": window_share(found)}
    return summary


def install_summary(ctx: Context) -> Dict:
    return {"frameworks": probe()}


def telemetry_summary(ctx: Context) -> Dict:
    return {"records": records(folder(ctx, "telemetry"))}


def allreduce_summary(ctx: Context) -> Dict:
    return {"records": records(folder(ctx, "allreduce"), ("status", "error", "allreduce",
                                                          "allreduce_busbw_GBps", "versions"))}


def maxbatch_summary(ctx: Context) -> Dict:
    path = folder(ctx, "maxbatch") / "maxbatch.csv"
    if not path.exists():
        return {"rows": []}
    with path.open() as handle:
        return {"rows": list(csv.DictReader(handle))}


def tune_summary(ctx: Context) -> Dict:
    return {"tune": read_tune(folder(ctx, "tune"))}


def preflight_summary(ctx: Context) -> Dict:
    cells = folder(ctx, "throughput") / "out"
    return {"verdict": read_preflight(folder(ctx, "preflight")),
            "fingerprints": read_fingerprints(cells, ResultStore(cells).records())}


def reference_summary(ctx: Context) -> Dict:
    """The best 1-GPU torchrun figure on the fast paths against the published one for this
    GPU, and what differs between them."""
    measured = [row for row in rows(ctx, "throughput") if row["status"] == "ok"
                and row["launcher"] == "torchrun" and row["total_devices"] == "1"]
    best = max(measured, key=lambda row: float(row["images_per_sec"]), default=None)
    name = next((r["device_name"] for r in records(folder(ctx, "throughput") / "out")
                 if r.get("device_name")), "")
    published = next((ref for key, ref in REFERENCES.items() if key in (name or "")), None)
    if best is None or published is None:
        return {"device_name": name, "measured": best, "published": published,
                "why_not": "no ok 1-GPU torchrun row" if best is None
                else f"no published figure for {name!r}"}
    figure = float(best["images_per_sec"])
    mlperf = next((ref for key, ref in MLPERF.items() if key in name), None)
    return {"device_name": name, "measured_images_per_sec": figure,
            "batch_size": best["batch_size"], "published": published[0],
            "published_images_per_sec": published[1], "ratio": figure / published[1],
            "what_differs": list(REFERENCE_DIFFERENCES),
            "mlperf": None if mlperf is None else {
                "source": mlperf[0], "images_per_sec_per_gpu": mlperf[1],
                "ratio": figure / mlperf[1], "what_differs": list(MLPERF_DIFFERENCES)}}


STEPS = [
    Step("install", "install the carried wheels (--wheels) and list the devices", 30,
         install_commands, install_summary, needs=lambda ctx: None),
    Step("throughput", "single against torchrun (and Horovod) at one GPU and all: ResNet-50 "
         "at 224, AMP and channels_last, batch 256, parallel_overhead, and where each cell's "
         "wall time went", 160,
         throughput_commands, sweep_summary("throughput")),
    Step("telemetry", "NVML telemetry and energy: images_per_joule, mfu against the peak "
         "table, the idle share of a profiled step", 50, telemetry_commands,
         telemetry_summary),
    Step("reference", "ResNet-50 AMP images/sec per GPU against the published figure", 0,
         lambda ctx: [], reference_summary, needs=lambda ctx: None, after=["throughput"]),
    Step("preflight", "scaling preflight on the GPU, and the fingerprint of the cells", 30,
         preflight_commands, preflight_summary, after=["throughput"]),
    Step("maxbatch", "the largest ResNet-50 batch at 224 with AMP, confirmed", 150,
         maxbatch_commands, maxbatch_summary),
    Step("real_data", "real JPEGs at 224 px with 4 and 12 loader workers (pinned memory), "
         "and the input_bound verdict", 200, real_data_commands, sweep_summary("real_data")),
    Step("jax", "JAX in bf16, single against the jax launcher", 120,
         framework_commands("jax", "jax", "jax", {"amp": True}, 128),
         sweep_summary("jax"), needs=missing("jax")),
    Step("tune", "a short scaling tune of ResNet-50", 270, tune_commands, tune_summary),
    Step("allreduce", "scaling allreduce under NCCL across the GPUs", 60,
         allreduce_commands, allreduce_summary,
         needs=lambda ctx: missing("torch")(ctx) if ctx.gpus > 1
         else "one GPU: no allreduce across GPUs"),
    Step("tensorflow", "TensorFlow with XLA and mixed precision, single against tf-mirrored",
         300, framework_commands("tensorflow", "tensorflow", "tf-mirrored",
                                 {"xla": True, "mixed_precision": True}, 128),
         sweep_summary("tensorflow"), needs=missing("tensorflow")),
    Step("mxnet", "MXNet with AMP, single against mxnet-kvstore", 300,
         framework_commands("mxnet", "mxnet", "mxnet-kvstore", {"amp": True}, 128),
         sweep_summary("mxnet"), needs=missing("mxnet")),
]
"""Every step, in the order the plan takes them: what matters most first."""
