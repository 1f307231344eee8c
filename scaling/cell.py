"""A cell: one measurement (framework, launcher, workload, device count, batch size, ...)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Sequence, Tuple

from scaling import hardware
from scaling.errors import ScalingError, positive_int
from scaling.frameworks import get_framework
from scaling.launchers import check_options, get_launcher, launchers_of
from scaling.units import format_bytes
from scaling.workers.collective_env import capture
from workloads import Workload, get_workload

DEVICE_TYPES = ("auto", "gpu", "cpu")
MODES = ("train", "forward", "forward_backward")
"""What a step does: ``train`` (forward, backward, optimizer step), ``forward`` (inference mode,
no gradient) or ``forward_backward`` (loss and backward, no optimizer step)."""

NOT_IDENTITY = {"timeout_s", "data_parallel", "threads_default", "references"}
"""Fields that do not change what is measured (or follow from fields that do), so they stay out
of the cell's identity."""

SINCE_DEFAULT = "omitted from the identity at its default"
"""Metadata for a field added after results were recorded: ``field(default=...,
metadata={"identity": SINCE_DEFAULT})`` keeps the ids of older cells, which had it at its
default, so their output folders stay resumable."""


@dataclass(frozen=True)
class Cell:
    """Everything that defines one measurement. Built through :func:`make_cell`."""

    framework: str
    launcher: str
    workload: str
    devices: int
    """Devices per node: GPUs, or CPU worker processes on a machine without GPUs."""
    batch_size: int
    """Per-device batch size."""
    image_size: int
    steps: int
    warmup: int
    device_type: str
    """``gpu`` or ``cpu`` (``auto`` is resolved when the cell is made)."""
    threads_per_device: int
    nodes: int = 1
    memory_limit: Optional[int] = None
    """Per-worker memory cap in bytes for CPU devices (None: no cap)."""
    repeat: int = 0
    purpose: str = "sweep"
    """``sweep`` for sweep and run cells, ``maxbatch`` for max-batch trials, ``confirmation``
    for runs that confirm a max-batch answer as a plain cell, ``allreduce`` for the collective
    benchmark (``scaling.execute.allreduce``), which trains nothing, ``tune`` for a trial of
    ``scaling tune`` (``scaling.tune``)."""
    options: Dict[str, Any] = field(default_factory=dict)
    """Framework-specific options (recorded and part of the identity)."""
    timeout_s: float = 600.0
    mode: str = field(default="train", metadata={"identity": SINCE_DEFAULT})
    """One of :data:`MODES`."""
    min_time_s: float = field(default=0.0, metadata={"identity": SINCE_DEFAULT})
    """The timed window runs at least ``steps`` steps and goes on until it lasts this long."""
    variant: str = field(default="", metadata={"identity": SINCE_DEFAULT})
    """A sweep's name for one environment of the framework (``tensorflow@tf215``), or empty."""
    profile: bool = field(default=False, metadata={"identity": SINCE_DEFAULT})
    """After the window, a few steps under the framework's profiler: where step time goes."""
    data_parallel: str = ""
    """The data-parallel mechanism the workers build, set by the launcher: ``ddp``,
    ``mirrored``, ``multiworker``, ``kvstore`` or ``horovod``."""
    threads_default: bool = False
    """Whether ``threads_per_device`` is the default rather than given: the cores over the
    largest device count per node of the run or sweep, the same at every point of a curve."""
    sizes: Tuple[int, ...] = field(default=(), metadata={"identity": SINCE_DEFAULT})
    """For purpose ``allreduce``: the message sizes in bytes that the cell times."""
    data: str = field(default="", metadata={"identity": SINCE_DEFAULT})
    """An ImageFolder tree of real JPEGs the cell trains on, through each framework's own input
    pipeline (``scaling.workers.input_data``); empty: one synthetic batch on the device."""
    loader_workers: int = field(default=0, metadata={"identity": SINCE_DEFAULT})
    """Worker processes (threads in tf.data) that decode and augment real images; 0: the
    training process does it between steps."""
    collective_env: Dict[str, str] = field(default_factory=dict,
                                           metadata={"identity": SINCE_DEFAULT})
    """The environment that tunes the collectives and launchers (``NCCL_*``, ``HOROVOD_*``, ...;
    :mod:`scaling.workers.collective_env`), captured when the cell is made, with the variables
    that the launcher's options set over it (``Launcher.option_env``); its workers run with
    exactly these values."""
    references: bool = True
    """Whether the workers time the scaling model's and the input verdict's references after
    the window (``scaling.sweep.REFERENCES`` decides it per repeat); they never change the
    window's figures."""

    def __post_init__(self):
        # A cell read back from JSON has its sizes as a list; the identity needs the tuple.
        object.__setattr__(self, "sizes", tuple(self.sizes))

    @property
    def environment(self) -> str:
        """The key of the cell's interpreter: its variant, or its framework."""
        return self.variant or self.framework

    @property
    def total_devices(self) -> int:
        return self.devices * self.nodes

    @property
    def global_batch_size(self) -> int:
        return self.batch_size * self.total_devices

    @property
    def cell_id(self) -> str:
        identity = {}
        for spec in dataclasses.fields(self):
            value = getattr(self, spec.name)
            if spec.name in NOT_IDENTITY or (spec.metadata.get("identity") == SINCE_DEFAULT
                                             and value == _default(spec)):
                continue
            identity[spec.name] = value
        blob = json.dumps(identity, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    def with_changes(self, **changes) -> "Cell":
        return dataclasses.replace(self, **changes)


def _default(spec: dataclasses.Field) -> Any:
    """A field's default value, from its default factory where it has one."""
    return spec.default_factory() if spec.default is dataclasses.MISSING else spec.default


def describe(fields: Dict) -> str:
    """A cell or record in a few words: ``torch/torchrun cifar10 x2 batch 16``."""
    devices = fields["devices"] * fields["nodes"]
    if fields.get("purpose") == "allreduce":
        return (f"{fields['framework']}/{fields['launcher']} allreduce x{devices}, "
                f"{len(fields['sizes'])} sizes")
    return (f"{fields['framework']}/{fields['launcher']} {fields['workload']} "
            f"x{devices} batch {fields['batch_size']}")


def resolve_device_type(device_type: str) -> str:
    if device_type not in DEVICE_TYPES:
        raise ScalingError(
            f"unknown device type {device_type!r}; valid: {', '.join(DEVICE_TYPES)}"
        )
    if device_type == "auto":
        return "gpu" if hardware.gpu_count() > 0 else "cpu"
    return device_type


def make_cell(
    *,
    framework: str,
    launcher: str,
    workload: str,
    devices: int,
    batch_size: int,
    image_size: Optional[int] = None,
    steps: int = 20,
    warmup: int = 5,
    device_type: str = "auto",
    threads_per_device: Optional[int] = None,
    nodes: int = 1,
    memory_limit: Optional[int] = None,
    repeat: int = 0,
    purpose: str = "sweep",
    options: Optional[Dict[str, Any]] = None,
    timeout_s: float = 600.0,
    mode: str = "train",
    min_time_s: float = 0.0,
    profile: bool = False,
    variant: str = "",
    allow_oversubscribe: bool = False,
    cores: Optional[int] = None,
    largest_devices: Optional[int] = None,
    default_threads: Optional[int] = None,
    sizes: Sequence[int] = (),
    data: Optional[str] = None,
    loader_workers: int = 0,
    collective_env: Optional[Dict[str, str]] = None,
    references: bool = True,
) -> Cell:
    """Validate the inputs, resolve defaults (launcher, device type, image size, threads) and
    build a cell. ``launcher=None`` picks the framework's default launcher.

    A CPU device is one fixed unit along a curve: without ``threads_per_device``, each device
    gets ``cores`` (default: this machine's) over ``largest_devices``, the largest device count
    per node of the run or sweep (default: ``devices``), or ``default_threads`` where given
    (the unit of the cells already in a run's folder). ``data``, a real-image folder, is
    kept as an absolute path, which every node must be able to read. ``collective_env``
    defaults to the tunable part of this process's environment
    (:mod:`scaling.workers.collective_env`); the variables that the launcher's options set
    replace the captured ones."""
    spec = get_workload(workload)
    if isinstance(loader_workers, bool) or not isinstance(loader_workers, int) \
            or loader_workers < 0:
        raise ScalingError(f"loader workers must be a non-negative integer, got "
                           f"{loader_workers!r}")
    if loader_workers and not data:
        raise ScalingError("loader workers read real images: give --data DIR as well")
    launcher_spec = _check_launcher(framework, launcher, options or {})
    _check_counts(devices=devices, batch_size=batch_size, steps=steps, nodes=nodes,
                  warmup=warmup, timeout_s=timeout_s, min_time_s=min_time_s, mode=mode)
    if nodes > 1 and not launcher_spec.multi_node:
        raise ScalingError(f"{launcher_spec.name} runs on one node; use --nodes 1")
    if launcher_spec.max_devices is not None and devices > launcher_spec.max_devices:
        raise ScalingError(f"{launcher_spec.name} drives at most {launcher_spec.max_devices} "
                           f"device(s) per node; use --devices {launcher_spec.max_devices}")
    resolved_type = resolve_device_type(device_type)
    if resolved_type == "gpu" and nodes == 1 and devices > hardware.gpu_count():
        raise ScalingError(
            f"{devices} GPUs requested but this machine has {hardware.gpu_count()}"
        )
    cores = cores or hardware.cpu_cores()
    threads_default = threads_per_device is None
    if threads_default:
        threads_per_device = default_threads or \
            max(1, cores // max(devices, largest_devices or 1))
    positive_int("threads per device", threads_per_device)
    _check_memory_limit(framework, resolved_type, memory_limit)
    if resolved_type == "cpu" and not allow_oversubscribe:
        check_oversubscription(devices, threads_per_device, cores)
    return Cell(
        framework=framework, launcher=launcher_spec.name, workload=workload, devices=devices,
        batch_size=batch_size, image_size=_image_size(spec, image_size), steps=steps,
        warmup=warmup, device_type=resolved_type, threads_per_device=threads_per_device,
        nodes=nodes, memory_limit=memory_limit, repeat=repeat, purpose=purpose,
        options=dict(options or {}), timeout_s=float(timeout_s), mode=mode,
        min_time_s=float(min_time_s), profile=bool(profile), variant=variant,
        data_parallel=launcher_spec.data_parallel, threads_default=threads_default,
        sizes=tuple(sizes), data=os.path.abspath(data) if data else "",
        loader_workers=loader_workers, references=references,
        collective_env=dict(sorted({
            **capture(os.environ if collective_env is None else collective_env),
            **launcher_spec.option_env(dict(options or {}))}.items())),
    )


def _check_launcher(framework: str, launcher: Optional[str], options: Dict):
    """The launcher's registry entry (the framework's default for None), once it is known to
    start ``framework`` and to take ``options``."""
    launcher_spec = get_launcher(launcher or get_framework(framework).default_launcher)
    if not launcher_spec.starts(framework):
        raise ScalingError(
            f"launcher {launcher_spec.name!r} does not start {framework}; {framework} "
            f"launchers: {', '.join(launchers_of(framework))}"
        )
    check_options(launcher_spec, framework, dict(options))
    return launcher_spec


def _check_counts(*, devices, batch_size, steps, nodes, warmup, timeout_s, min_time_s,
                  mode) -> None:
    for name, value in (("devices", devices), ("batch size", batch_size), ("steps", steps),
                        ("nodes", nodes)):
        positive_int(name, value)
    if mode not in MODES:
        raise ScalingError(f"unknown mode {mode!r}; valid modes: {', '.join(MODES)}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ScalingError(f"warmup must be a non-negative integer, got {warmup!r}")
    if timeout_s <= 0:
        raise ScalingError(f"timeout must be positive, got {timeout_s!r}")
    if isinstance(min_time_s, bool) or not isinstance(min_time_s, (int, float)) or min_time_s < 0:
        raise ScalingError(f"min_time_s must be a non-negative number of seconds, "
                           f"got {min_time_s!r}")


def _image_size(spec: Workload, image_size: Optional[int]) -> int:
    """The workload's nominal input side, or ``image_size`` once the network accepts it."""
    size = spec.input_size if image_size is None else positive_int("image size", image_size)
    if size < spec.min_image_size:
        raise ScalingError(
            f"image size {size} is below {spec.name}'s smallest input, {spec.min_image_size}"
        )
    return size


def _check_memory_limit(framework: str, device_type: str, memory_limit: Optional[int]) -> None:
    if memory_limit is None:
        return
    if device_type != "cpu":
        raise ScalingError("a memory limit applies to CPU devices only; GPUs use their own memory")
    smallest = get_framework(framework).min_memory_limit
    if memory_limit < smallest:
        raise ScalingError(
            f"memory limit {format_bytes(memory_limit)} is too small to start a {framework} "
            f"worker; the smallest that works is {format_bytes(smallest)}"
        )


def check_oversubscription(devices: int, threads_per_device: int,
                            cores: Optional[int] = None) -> None:
    """CPU devices x threads beyond the cores of a node (default: this machine) measure
    contention, not scaling."""
    cores = cores or hardware.cpu_cores()
    if devices * threads_per_device > cores:
        raise ScalingError(
            f"{devices} CPU devices x {threads_per_device} threads need "
            f"{devices * threads_per_device} cores but this machine has {cores}: such results "
            "measure contention, not scaling; pass --allow-oversubscribe to run them anyway"
        )
