"""Sweep files: YAML that names frameworks, launchers, workloads, device counts and batch sizes.

A sweep expands to cells, one per combination and repeat. Each curve's baseline, the ``single``
cell of its framework (one process, one device, no data-parallel wrapper), is added and
measured before each round of its curves' repeats and once after the last (:func:`in_rounds`).
Without ``threads_per_device``, a CPU device is the same unit at every point: the cores of a
node over the largest device count of the sweep.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple, Union

import yaml

from scaling import hardware
from scaling.cell import Cell, make_cell, resolve_device_type
from scaling.errors import ScalingError, positive_int
from scaling.frameworks import framework_names, get_framework
from scaling.launchers import LAUNCHERS, launchers_of
from scaling.launchers.single import BASELINE_LAUNCHER
from scaling.units import parse_bytes


@dataclass
class FrameworkSection:
    launchers: List[str]
    """Launchers to run this framework under, for example ``[torchrun]``."""
    python: Optional[str] = None
    """Interpreter that runs this framework's workers (default: the harness's own)."""
    options: Dict[str, Any] = field(default_factory=dict)
    """Framework-specific options passed to every cell."""
    framework: Optional[str] = None
    """For a variant (a key such as ``tensorflow@tf215``): the framework it runs."""

    def variant(self, key: str) -> str:
        """The section's key when it names a variant of its framework, else empty."""
        return key if self.framework and key != self.framework else ""


@dataclass
class MaxBatchSection:
    """How ``batch_sizes: [max]`` is found before the sweep runs (see ``scaling maxbatch``)."""

    min: Optional[int] = None
    max: Optional[int] = None
    multiple_of: int = 1
    headroom: Optional[float] = None
    strategy: str = "model"
    steps: int = 3
    warmup: int = 1


@dataclass
class SlurmSection:
    """``slurm:`` in a sweep file; the matching command-line flags override it."""

    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    time: str = "0:30:00"
    """Time limit of each cell's job (array task), in any form sbatch takes."""
    gpus_per_node: Optional[int] = None
    """Default: the cell's devices per node, on GPUs."""
    cpus_per_task: Optional[int] = None
    """Default: devices x threads per device."""
    constraint: Optional[str] = None
    extra_args: List[str] = field(default_factory=list)
    """Passed to sbatch as they are."""
    parallel: Optional[int] = None
    """At most this many array tasks of a job run at once (sbatch --array=...%N)."""
    shared: bool = False
    """Let other jobs share a cell's nodes; by default each cell asks for whole nodes
    (sbatch --exclusive), so nothing else runs beside what it measures."""
    exclude: List[str] = field(default_factory=list)
    """Nodes the cells keep off (sbatch --exclude); ``--preflight`` adds those it flags."""
    allocation: str = "array"
    """``array``: one job array per group of cells, one task per cell; ``one``: one job that
    holds the sweep's largest node count and runs every cell inside it as an ``srun`` step
    (``scaling.slurm.allocation``)."""


ALLOCATIONS = ("array", "one")

REFERENCES = {
    "first": "the first repeat of each point (a curve's first baseline too) times them",
    "every": "every repeat times them",
    "none": "throughput alone: no repeat times them, and the report has no scaling model",
}
"""Which repeats time the references after their window (the scaling model's local steps and
allreduce, the input verdict's figures), which do not change between a point's repeats."""


def times_references(policy: str, repeat: int) -> bool:
    """Whether a cell of this ``repeat`` times the references under ``policy``."""
    return policy == "every" or (policy == "first" and repeat == 0)


def check_references(policy: str, where: str) -> str:
    if policy not in REFERENCES:
        raise ScalingError(f"{where}: references must be one of {', '.join(REFERENCES)}, "
                           f"got {policy!r}")
    return policy


SYMBOLIC_BATCH = re.compile(r"max(?:\*(0?\.[0-9]+|1(?:\.0*)?))?")
"""``max`` or ``max*F`` (0 < F <= 1): the largest batch that fits, or that fraction of it."""


@dataclass
class SweepConfig:
    frameworks: Dict[str, FrameworkSection]
    workloads: List[str]
    batch_sizes: List[Union[int, str]]
    """Per-device batch sizes; ``max`` or ``max*0.9`` use the largest batch that fits."""
    devices: Union[List[int], str] = "all"
    """Devices per node, or ``all``: 1, 2, 4, ... up to every device of the machine."""
    name: str = "sweep"
    device_type: Union[str, List[str]] = "auto"
    """``auto`` (GPUs if there are any, else CPU workers), ``gpu`` or ``cpu``."""
    nodes: Union[int, List[int]] = 1
    """Nodes per cell, or a list of node counts (an axis, like ``devices``); cells on several
    nodes run under a scheduler (``--backend slurm``)."""
    image_size: Optional[int] = None
    """Square input side; the workload's nominal size when omitted."""
    modes: List[str] = field(default_factory=lambda: ["train"])
    """What each step does: ``train``, ``forward`` or ``forward_backward``; an axis."""
    steps: int = 20
    warmup: int = 5
    min_time_s: float = 0.0
    """Each cell's timed window goes on past ``steps`` until it lasts this long."""
    profile: bool = False
    """After each window, profile a few steps and record where the step time goes."""
    repeats: int = 1
    timeout_s: float = 600.0
    threads_per_device: Union[None, int, List[int]] = None
    memory_limit: Optional[str] = None
    """Per-worker memory cap for CPU devices, such as ``3GiB``."""
    maxbatch: Optional[MaxBatchSection] = None
    """Settings of the max-batch search behind symbolic batch sizes."""
    allow_oversubscribe: bool = False
    """Run CPU cells whose devices x threads exceed the cores (they measure contention)."""
    slurm: Optional[SlurmSection] = None
    """Resources of the Slurm jobs under ``--backend slurm``."""
    single_baseline: bool = True
    """Add each curve's ``single`` baseline (false: its own one-device point, said so)."""
    data: Optional[str] = None
    """An ImageFolder tree of real JPEGs every cell trains on (see ``scaling make-data``)."""
    loader_workers: Union[int, List[int]] = 0
    """Loader workers for real data, or a list of counts (an axis)."""
    prices: Dict[str, float] = field(default_factory=dict)
    """US dollars per hour by device type, device name or ``instance`` (see scaling.report.cost)."""
    references: str = "first"
    """Which repeats of a point time the references after their window (:data:`REFERENCES`)."""
    share_processes: bool = True
    """Cells whose launch matches share a process tree (``scaling.execute.trees``)."""

    def device_types(self) -> List[str]:
        """The resolved device types: one, or a list (an axis: ``[cpu, gpu]``)."""
        types = self.device_type if isinstance(self.device_type, list) else [self.device_type]
        return list(dict.fromkeys(resolve_device_type(kind) for kind in types))

    def thread_counts(self) -> List[Optional[int]]:
        """CPU threads per device: one value (None: the default split), or a list (an axis)."""
        if isinstance(self.threads_per_device, list):
            return sorted(set(self.threads_per_device))
        return [self.threads_per_device]

    def loader_worker_counts(self) -> List[int]:
        counts = self.loader_workers if isinstance(self.loader_workers, list) \
            else [self.loader_workers]
        return sorted(set(counts))

    def node_counts(self) -> List[int]:
        counts = self.nodes if isinstance(self.nodes, list) else [self.nodes]
        for count in counts:
            positive_int("nodes", count)
        return sorted(set(counts))

    def needs_max_batch(self) -> bool:
        return any(isinstance(batch, str) for batch in self.batch_sizes)

def check_prices(prices, where: str) -> Dict[str, float]:
    if not isinstance(prices, dict):
        raise ScalingError(f"{where}: prices must map a device type, device name or instance "
                           "to US dollars per hour")
    for key, value in prices.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ScalingError(f"{where}: price of {key!r} must be a number of US dollars per "
                               f"hour, got {value!r}")
    return {str(key): float(value) for key, value in prices.items()}


def _check_keys(data: Dict, cls, where: str) -> None:
    valid = [f.name for f in dataclasses.fields(cls)]
    for key in data:
        if key not in valid:
            raise ScalingError(f"{where}: unknown key {key!r}; valid keys: {', '.join(valid)}")
    missing = [f.name for f in dataclasses.fields(cls)
               if f.name not in data and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ScalingError(f"{where}: missing key(s) {', '.join(missing)}")


def _as_list(value, key: str, where: str) -> List:
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, (int, str)):
        return [value]
    raise ScalingError(f"{where}: {key} must be a list, got {value!r}")


def parse_sweep(data: Any, where: str = "sweep") -> SweepConfig:
    if not isinstance(data, dict):
        raise ScalingError(f"{where}: expected a mapping of keys at the top level")
    _check_keys(data, SweepConfig, where)
    sections = {}
    if not isinstance(data["frameworks"], dict) or not data["frameworks"]:
        raise ScalingError(f"{where}: frameworks must map framework names to their launchers")
    for key, section in data["frameworks"].items():
        section = section or {}
        if not isinstance(section, dict):
            raise ScalingError(f"{where}: frameworks.{key} must be a mapping")
        name = section.get("framework") or key
        if name not in framework_names():
            hint = "" if section.get("framework") or "@" not in key else \
                f" (a variant such as {key!r} names its framework: framework: ...)"
            raise ScalingError(f"{where}: unknown framework {name!r}; valid frameworks: "
                               f"{', '.join(framework_names())}{hint}")
        _check_keys(section, FrameworkSection, f"{where}: frameworks.{key}")
        launchers = _as_list(section["launchers"], "launchers", where)
        for launcher in launchers:
            if launcher not in LAUNCHERS or not LAUNCHERS[launcher].starts(name):
                raise ScalingError(f"{where}: {launcher!r} is not a {name} launcher; valid: "
                                   f"{', '.join(launchers_of(name))}")
        sections[key] = FrameworkSection(**{**section, "launchers": launchers,
                                            "framework": name if name != key else None})
    values = {**data, "frameworks": sections}
    for key in ("workloads", "batch_sizes", "modes"):
        if key in data:
            values[key] = _as_list(data[key], key, where)
    for batch in values["batch_sizes"]:
        if isinstance(batch, str) and not SYMBOLIC_BATCH.fullmatch(batch):
            raise ScalingError(f"{where}: batch size {batch!r} is neither a number nor max or "
                               "max*F with 0 < F <= 1")
    section = data.get("maxbatch")
    if section is not None:
        if not isinstance(section, dict):
            raise ScalingError(f"{where}: maxbatch must be a mapping")
        _check_keys(section, MaxBatchSection, f"{where}: maxbatch")
        values["maxbatch"] = MaxBatchSection(**section)
    elif any(isinstance(batch, str) for batch in values["batch_sizes"]):
        values["maxbatch"] = MaxBatchSection()
    if data.get("devices", "all") != "all":
        values["devices"] = _as_list(data["devices"], "devices", where)
    if isinstance(data.get("nodes"), (list, tuple)):
        values["nodes"] = list(data["nodes"])
    if data.get("slurm") is not None:
        if not isinstance(data["slurm"], dict):
            raise ScalingError(f"{where}: slurm must be a mapping")
        _check_keys(data["slurm"], SlurmSection, f"{where}: slurm")
        values["slurm"] = SlurmSection(**{
            **data["slurm"], "extra_args": [str(arg) for arg in _as_list(
                data["slurm"].get("extra_args", []), "slurm.extra_args", where)],
            "exclude": [str(node) for node in _as_list(
                data["slurm"].get("exclude", []), "slurm.exclude", where)]})
        if values["slurm"].allocation not in ALLOCATIONS:
            raise ScalingError(f"{where}: slurm.allocation must be one of "
                               f"{', '.join(ALLOCATIONS)}, got {values['slurm'].allocation!r}")
    if "prices" in data:
        values["prices"] = check_prices(data["prices"], where)
    check_references(data.get("references", "first"), where)
    config = SweepConfig(**values)
    config.node_counts()
    return config


def load_sweep(path) -> SweepConfig:
    try:
        with open(path) as text:
            data = yaml.safe_load(text)
    except OSError as error:
        raise ScalingError(f"cannot read sweep file {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise ScalingError(f"{path}: not valid YAML ({error.problem})") from None
    return parse_sweep(data, str(path))


def interpreters(config: SweepConfig) -> Dict[str, str]:
    """Framework -> the interpreter that runs its workers, where the sweep names one."""
    return {name: section.python for name, section in config.frameworks.items() if section.python}


def device_counts(devices: Union[List[int], str], device_type: str,
                  cores: Optional[int] = None) -> List[int]:
    """``all`` -> 1, 2, 4, ... and every device of a node: its GPUs, or its ``cores`` (default:
    this machine's)."""
    if devices != "all":
        return sorted(set(devices))
    available = hardware.gpu_count() if device_type == "gpu" else cores or hardware.cpu_cores()
    counts = {1, available}
    power = 2
    while power < available:
        counts.add(power)
        power *= 2
    return sorted(counts)


def resolve_batch(batch: Union[int, str], max_batch: Optional[int], multiple_of: int
                  ) -> Optional[int]:
    """A numeric batch as is; ``max*F`` as F times the found maximum, rounded down to the
    granularity; None when no batch fitted."""
    if not isinstance(batch, str):
        return batch
    if max_batch is None:
        return None
    fraction = float(SYMBOLIC_BATCH.fullmatch(batch).group(1) or 1)
    return max(multiple_of, int(max_batch * fraction) // multiple_of * multiple_of)


def expand(config: SweepConfig, max_batches: Optional[Dict[Tuple, Optional[int]]] = None,
           cores: Optional[int] = None) -> List[Cell]:
    """The sweep's cells in the order they run (:func:`in_rounds`). ``max_batches`` maps
    (framework, launcher, workload, devices) to the largest batch that fits, for symbolic batch
    sizes; a combination where none fitted has no cell. ``cores``: CPU cores of a node where
    the cells run (default: this machine's)."""
    positive_int("repeats", config.repeats)
    memory_limit = parse_bytes(config.memory_limit) if config.memory_limit else None
    cells = []
    for framework, section in config.frameworks.items():
        for device_type in config.device_types():
            counts = device_counts(config.devices, device_type, cores)
            combos = itertools.product(
                section.launchers, config.workloads, config.modes, config.batch_sizes,
                config.node_counts(), counts, config.thread_counts(),
                config.loader_worker_counts(), range(config.repeats),
            )
            for (launcher, workload, mode, batch, nodes, devices, threads, loader_workers,
                 repeat) in combos:
                most = LAUNCHERS.get(launcher).max_devices
                if most is not None and (devices > most or nodes > 1):
                    continue  # a launcher such as single drives one device: its one point
                batch_size = resolve_batch(
                    batch, (max_batches or {}).get((framework, launcher, workload, devices)),
                    config.maxbatch.multiple_of if config.maxbatch else 1)
                if batch_size is None:
                    continue
                cells.append(make_cell(
                    framework=section.framework or framework, variant=section.variant(framework),
                    launcher=launcher, workload=workload, devices=devices,
                    batch_size=batch_size, image_size=config.image_size, steps=config.steps,
                    warmup=config.warmup, device_type=device_type, threads_per_device=threads,
                    nodes=nodes, memory_limit=memory_limit, repeat=repeat,
                    options=section.options, timeout_s=config.timeout_s, mode=mode,
                    min_time_s=config.min_time_s, profile=config.profile,
                    allow_oversubscribe=config.allow_oversubscribe, cores=cores,
                    largest_devices=max(counts), data=config.data,
                    loader_workers=loader_workers,
                ))
    return [cell.with_changes(references=times_references(config.references, cell.repeat))
            for cell in in_rounds(cells, config.repeats, config.single_baseline)]


def in_rounds(cells: List[Cell], repeats: int, with_baseline: bool) -> List[Cell]:
    """``cells`` in the order they run, so that each baseline is measured several times over
    the time its curves run. Cells that share a baseline (their ``single`` twin) run together,
    one group after another; within a group, repeat r of every cell is round r, run in the
    opposite order in odd rounds (so that a steady drift of the machine's speed falls evenly on
    every point). With ``with_baseline``, the group's ``single`` cell runs before each round
    and once more after the last (as repeat ``repeats``), bracketing its curves."""
    groups: Dict[str, List[Cell]] = {}
    for cell in cells:
        groups.setdefault(single_twin(cell).with_changes(repeat=0).cell_id, []).append(cell)
    ordered: List[Cell] = []
    for members in groups.values():
        twin = single_twin(members[0])
        for round_ in range(repeats):
            batch = [cell for cell in members if cell.repeat == round_]
            if with_baseline:
                ordered.append(twin.with_changes(repeat=round_))
            ordered.extend(reversed(batch) if round_ % 2 else batch)
        if with_baseline:
            ordered.append(twin.with_changes(repeat=repeats))
    return list({cell.cell_id: cell for cell in ordered}.values())


def single_twin(cell: Cell) -> Cell:
    """The cell a curve is measured against: ``single``, one device on one node, with the
    curve's framework, workload, batch, image size, device type, threads, mode and repeat, and
    only the framework's options (a launcher's own do not apply to it)."""
    single = LAUNCHERS.get(BASELINE_LAUNCHER)
    framework_options = get_framework(cell.framework).options
    return cell.with_changes(
        launcher=single.name, devices=1, nodes=1, data_parallel=single.data_parallel,
        options={key: value for key, value in cell.options.items() if key in framework_options})
