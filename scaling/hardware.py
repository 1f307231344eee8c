"""What devices and frameworks this machine has, without importing any framework."""

from __future__ import annotations

import functools
import json
import os
import platform
import shutil
import subprocess
from typing import Dict, List, Optional

NVIDIA_SMI_FIELDS = [
    ("index", "index"),
    ("name", "name"),
    ("memory_used_mib", "memory.used"),
    ("memory_total_mib", "memory.total"),
    ("utilization_pct", "utilization.gpu"),
    ("temperature_c", "temperature.gpu"),
    ("power_w", "power.draw"),
    ("power_limit_w", "power.limit"),
    ("performance_state", "pstate"),
    ("ecc_mode", "ecc.mode.current"),
    ("compute_mode", "compute_mode"),
    ("persistence_mode", "persistence_mode"),
    ("bus_id", "pci.bus_id"),
    ("fan_pct", "fan.speed"),
]


def query_gpus() -> List[Dict[str, str]]:
    """One dict per GPU with the fields nvidia-smi shows; empty when there is no NVIDIA GPU."""
    if shutil.which("nvidia-smi") is None:
        return []
    query = ",".join(field for _, field in NVIDIA_SMI_FIELDS)
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        values = [value.strip() for value in line.split(",")]
        gpus.append({key: value for (key, _), value in zip(NVIDIA_SMI_FIELDS, values)})
    return gpus


@functools.lru_cache(maxsize=None)
def gpu_count() -> int:
    return len(query_gpus())


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


_VERSION_PROBE = """
import importlib.metadata as m, json, sys
out = {"python": sys.version.split()[0]}
for name in sys.argv[1:]:
    try:
        out[name] = m.version(name)
    except m.PackageNotFoundError:
        pass
print(json.dumps(out))
"""

def installed_versions(python: str, packages: List[str]) -> Optional[Dict[str, str]]:
    """Versions of the installed ones of ``packages`` (distribution names) as seen by the
    interpreter ``python``; None if it cannot run."""
    try:
        out = subprocess.run(
            [python, "-c", _VERSION_PROBE, *packages],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout
        return json.loads(out)
    except (subprocess.SubprocessError, OSError, ValueError):
        return None
