"""What a node was when it ran a cell: its fingerprint, kept once per node in the output folder
and referenced from every record by its hash.

A fingerprint holds the host, the kernel, the CPU (model, logical CPUs, frequency governors),
the NUMA layout, the container image where the cell ran in one, the CUDA, cuDNN and NCCL
versions (the wheels of the cell's interpreter, the libraries installed on the node), the GPUs
through NVIDIA's management library (driver and CUDA driver versions; per GPU its name, SM and
memory clocks, power limit, throttle reasons and MIG mode), ``nvidia-smi topo -m`` and the
collective environment the workers ran with. It holds what a node is set to, not how busy it
is: clocks are the maximum and application clocks (the window's own SM clock is in the
record's telemetry), and an idle GPU's "idle" reason is left out of its throttle reasons, so
the cells of one sweep on one node share one fingerprint.

Each is written to ``OUT/fingerprints/HASH.json``, named by a hash of its canonical JSON, so
the same node in the same state is one file however many cells it ran. Each node of a cell
notes its hash in the cell's folder (``cells/CELL/fingerprint-nodeN.json``) before its ranks
start, and the record's ``fingerprint`` lists the hashes by node rank (so two nodes that share
a host name stay two).
"""

from __future__ import annotations

import contextlib
import functools
import glob
import hashlib
import json
import os
import platform
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

from scaling import hardware
from scaling.atomic import write_json_atomically

FINGERPRINTS_DIR = "fingerprints"
"""The folder of OUT that holds one file per fingerprint."""

WHEELS = {
    "cuda": ("nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu11",
             "nvidia-cuda-runtime"),
    "cudnn": ("nvidia-cudnn-cu13", "nvidia-cudnn-cu12", "nvidia-cudnn-cu11"),
    "nccl": ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11"),
}
"""The pip wheels that bring CUDA's runtime, cuDNN and NCCL into an interpreter."""

LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
                "/usr/local/cuda/lib64")
"""Where a node or a container image installs cuDNN and NCCL outside any wheel."""

SYSTEM_LIBRARIES = {"cudnn": "libcudnn.so.*", "nccl": "libnccl.so.*"}

THROTTLE_REASONS = {
    0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost",
    0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake",
    0x100: "display_clock", 0x200: "board_limit", 0x400: "reliability",
}
"""NVML's clock throttle (event) reason bits, by name; ``GpuIdle`` (0x1) is left out."""

MIG_REASON = "NCCL does not support communication between MIG instances"

IDENTITY = ("host",)
"""Fields that tell nodes apart by name alone: nodes of one run always differ in them."""


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _read(path) -> Optional[str]:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def cpu_facts() -> Dict:
    """The CPU's model, logical CPUs and frequency governors (null where cpufreq is absent)."""
    governors = {_read(path) for path in
                 glob.glob("/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor")}
    return {"model": hardware.cpu_model(), "logical_cpus": os.cpu_count(),
            "governors": sorted(governors - {None}) or None}


def numa_nodes() -> Optional[Dict[str, str]]:
    """Each NUMA node's CPU list (``{"node0": "0-63"}``), or null where the kernel has none."""
    nodes = glob.glob("/sys/devices/system/node/node[0-9]*")
    found = {Path(node).name: _read(Path(node) / "cpulist")
             for node in sorted(nodes, key=lambda path: int(re.sub(r"\D", "", Path(path).name)))}
    return found or None


def container(environ: Mapping[str, str], root: Path = Path("/")) -> Optional[Dict]:
    """The container the harness runs in: Apptainer or Singularity (their image from the
    environment), Podman (``/run/.containerenv``), Docker (``/.dockerenv``, no image name
    inside); null outside one."""
    for runtime in ("APPTAINER", "SINGULARITY"):
        image = environ.get(f"{runtime}_CONTAINER") or environ.get(f"{runtime}_NAME")
        if image:
            return {"runtime": runtime.lower(), "image": image}
    podman = _read(root / "run/.containerenv")
    if podman is not None:
        fields = dict(re.findall(r'^(\w+)="(.*)"$', podman, re.MULTILINE))
        return {"runtime": "podman", "image": fields.get("image"),
                "image_id": fields.get("imageid")}
    if (root / ".dockerenv").exists():
        return {"runtime": "docker", "image": None}
    return None


@functools.lru_cache(maxsize=None)
def wheel_versions(python: str) -> Optional[Dict[str, str]]:
    """Python's and the CUDA, cuDNN and NCCL wheels' versions in the interpreter ``python``,
    those it has; null where it cannot run."""
    found = hardware.installed_versions(python, [w for wheels in WHEELS.values() for w in wheels])
    if found is None:
        return None
    versions = {"python": found["python"]}
    for library, wheels in WHEELS.items():
        present = [found[wheel] for wheel in wheels if wheel in found]
        if present:
            versions[library] = present[0]
    return versions


def system_libraries(dirs: Iterable[str] = LIBRARY_DIRS,
                     toolkit: str = "/usr/local/cuda/version.json") -> Dict[str, str]:
    """cuDNN's and NCCL's versions from their files' names (``libnccl.so.2.21.5``), and the
    CUDA toolkit's from ``/usr/local/cuda/version.json``, those the node has."""
    versions = {}
    for library, pattern in SYSTEM_LIBRARIES.items():
        names = [Path(path).name for folder in dirs for path in glob.glob(f"{folder}/{pattern}")]
        full = [name.split(".so.", 1)[1] for name in names if name.count(".") >= 4]
        if full:
            versions[library] = max(full, key=lambda v: [int(p) for p in re.findall(r"\d+", v)])
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        versions["cuda"] = json.loads(Path(toolkit).read_text())["cuda"]["version"]
    return versions


def _answer(nvml, function: str, *args):
    """NVML's answer, or None where the GPU or driver does not give it."""
    try:
        return getattr(nvml, function)(*args)
    except nvml.NVMLError:
        return None


def throttle_reasons(mask: Optional[int]) -> Optional[List[str]]:
    """The names of the reasons set in NVML's ``mask``, idle left out."""
    if mask is None:
        return None
    return [name for bit, name in sorted(THROTTLE_REASONS.items()) if mask & bit]


def device_facts(nvml, handle) -> Dict:
    """One GPU as NVML gives it."""
    sm, memory = nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_MEM
    reasons = ("nvmlDeviceGetCurrentClocksEventReasons"
               if hasattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons")
               else "nvmlDeviceGetCurrentClocksThrottleReasons")
    power = _answer(nvml, "nvmlDeviceGetEnforcedPowerLimit", handle)
    mig = _answer(nvml, "nvmlDeviceGetMigMode", handle)
    return {
        "name": _text(nvml.nvmlDeviceGetName(handle)),
        "sm_clock_max_mhz": _answer(nvml, "nvmlDeviceGetMaxClockInfo", handle, sm),
        "memory_clock_max_mhz": _answer(nvml, "nvmlDeviceGetMaxClockInfo", handle, memory),
        "sm_clock_applications_mhz": _answer(nvml, "nvmlDeviceGetApplicationsClock", handle, sm),
        "memory_clock_applications_mhz": _answer(nvml, "nvmlDeviceGetApplicationsClock",
                                                 handle, memory),
        "power_limit_w": None if power is None else power / 1000.0,
        "throttle_reasons": throttle_reasons(_answer(nvml, reasons, handle)),
        "mig_mode": None if mig is None else bool(mig[0]),
    }


def gpu_facts(nvml) -> Optional[Dict]:
    """The driver, the CUDA version it supports, and every GPU, from an initialized NVML
    module (``pynvml``); null without one."""
    if nvml is None:
        return None
    cuda = _answer(nvml, "nvmlSystemGetCudaDriverVersion")
    return {
        "driver": _text(nvml.nvmlSystemGetDriverVersion()),
        "cuda_driver": None if cuda is None else f"{cuda // 1000}.{cuda % 1000 // 10}",
        "devices": [device_facts(nvml, nvml.nvmlDeviceGetHandleByIndex(index))
                    for index in range(nvml.nvmlDeviceGetCount())],
    }


def open_nvml():
    """``pynvml``, initialized, or None where there is no library or no NVIDIA driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # no library, no driver: no GPU facts
        return None


TERMINAL_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
"""A terminal's escape sequence (``nvidia-smi topo -m`` underlines its header with them)."""


def topology() -> Optional[str]:
    """``nvidia-smi topo -m``: how the GPUs, NICs and CPUs connect, as plain text; null
    without it."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        table = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True,
                               timeout=30, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return None
    return TERMINAL_ESCAPE.sub("", table).strip()


def gather(python: str, collective_env: Mapping[str, str], environ=os.environ) -> Dict:
    """This node's fingerprint for a cell run by the interpreter ``python`` with
    ``collective_env``."""
    uname = platform.uname()
    return {
        "host": socket.gethostname(),
        "kernel": f"{uname.system} {uname.release} {uname.version}",
        "cpu": cpu_facts(),
        "numa": numa_nodes(),
        "container": container(environ),
        "libraries": wheel_versions(python),
        "system_libraries": system_libraries(),
        "gpu": gpu_facts(open_nvml()),
        "topology": topology(),
        "collective_env": dict(collective_env),
    }


def digest(fingerprint: Dict) -> str:
    """The hash that names ``fingerprint``: SHA-256 of its canonical JSON, 16 hex digits."""
    canonical = json.dumps(fingerprint, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def store(out_dir, fingerprint: Dict) -> str:
    """Write ``fingerprint`` to ``OUT/fingerprints/HASH.json`` unless it is there; its hash."""
    name = digest(fingerprint)
    path = Path(out_dir) / FINGERPRINTS_DIR / f"{name}.json"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomically(path, fingerprint)
    return name


def take(out_dir, cell_dir: Path, node_rank: int, python: str,
         collective_env: Mapping[str, str]) -> Dict:
    """Gather and store this node's fingerprint and note its hash in the cell's folder;
    the fingerprint."""
    fingerprint = gather(python, collective_env)
    write_json_atomically(_note(cell_dir, node_rank), store(out_dir, fingerprint))
    return fingerprint


def _note(cell_dir, node_rank: int) -> Path:
    return Path(cell_dir) / f"fingerprint-node{node_rank}.json"


def noted(cell_dir, nodes: int) -> Optional[List[Optional[str]]]:
    """The fingerprint hash each of the cell's ``nodes`` noted, by node rank (null for a node
    that noted none); null where none did (a cell a scheduler ended before it started)."""
    hashes = [json.loads(_note(cell_dir, rank).read_text()) if _note(cell_dir, rank).exists()
              else None for rank in range(nodes)]
    return hashes if any(hashes) else None


def mig_refusal(fingerprint: Dict, indices: List[int], total_devices: int) -> Optional[str]:
    """Why a cell of ``total_devices`` GPUs cannot run on the GPUs ``indices`` of the node
    ``fingerprint`` describes, or None: more than one GPU where one of them is in MIG mode."""
    gpu = fingerprint.get("gpu")
    if total_devices < 2 or not gpu:
        return None
    mig = [index for index in indices
           if index < len(gpu["devices"]) and gpu["devices"][index]["mig_mode"]]
    if not mig:
        return None
    return (f"MIG mode is on for GPU {', '.join(map(str, mig))} of {fingerprint['host']}: a cell "
            f"of {total_devices} GPUs cannot run on MIG instances ({MIG_REASON})")


def read_fingerprints(out_dir, records: Iterable[Dict]) -> Dict[str, Dict]:
    """The fingerprints that ``records`` reference and that ``OUT/fingerprints`` holds, by
    hash."""
    folder = Path(out_dir) / FINGERPRINTS_DIR
    names = sorted({name for record in records for name in record.get("fingerprint") or []
                    if name})
    return {name: json.loads((folder / f"{name}.json").read_text()) for name in names
            if (folder / f"{name}.json").exists()}


def flatten(value, prefix: str = "") -> Dict[str, str]:
    """Every leaf of a fingerprint by its dotted path (``gpu.devices.0.power_limit_w``), as
    JSON text; a list of plain values is one leaf."""
    if isinstance(value, dict):
        pairs: Iterable[Tuple] = value.items()
    elif isinstance(value, list) and any(isinstance(item, (dict, list)) for item in value):
        pairs = enumerate(value)
    else:
        return {prefix: json.dumps(value, sort_keys=True)}
    found = {}
    for key, item in pairs:
        found.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    return found


def field_values(fingerprints: Iterable[Dict]) -> Dict[str, set]:
    """Each field and the values it has over ``fingerprints`` (a missing field: ``absent``)."""
    flat = [flatten(fingerprint) for fingerprint in fingerprints]
    fields = {field for leaves in flat for field in leaves}
    return {field: {leaves.get(field, "absent") for leaves in flat} for field in fields}


def differing_fields(base: Iterable[Dict], new: Iterable[Dict]) -> List[str]:
    """The fields whose values over the ``base`` fingerprints differ from those over ``new``."""
    before, after = field_values(base), field_values(new)
    return sorted(field for field in before.keys() | after.keys()
                  if before.get(field, {"absent"}) != after.get(field, {"absent"}))


def varying_fields(fingerprints: Iterable[Dict]) -> List[str]:
    """The fields that differ among ``fingerprints`` themselves, host names left out."""
    return sorted(field for field, values in field_values(fingerprints).items()
                  if len(values) > 1 and field not in IDENTITY)
