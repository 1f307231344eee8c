"""Where results came from: the commands that wrote an output folder, its sweep file, and the
versions, devices, hosts and node fingerprints its records name."""

from __future__ import annotations

import shlex
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Dict, List

from scaling.execute.fingerprint import read_fingerprints, varying_fields

COMMANDS_FILE = "commands.log"
SWEEP_FILE = "sweep.yaml"


def note_command(out_dir, argv: List[str]) -> None:
    """Append ``UTC-TIME scaling ARGS`` to OUT/commands.log (one short append per command)."""
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    with open(Path(out_dir) / COMMANDS_FILE, "a") as log:
        log.write(f"{stamp} {shlex.join(['scaling', *argv])}\n")


def keep_sweep_file(out_dir, config) -> None:
    """Copy the sweep file into OUT, so the folder says what it measured."""
    target = Path(out_dir) / SWEEP_FILE
    if not target.exists() or not target.samefile(config):
        shutil.copyfile(config, target)


def describe(fingerprint: Dict) -> str:
    """A node's fingerprint in one line: CPU, governors, kernel, container, driver, GPUs."""
    cpu, gpu, box = fingerprint["cpu"], fingerprint.get("gpu"), fingerprint.get("container")
    parts = [f"{cpu['model']}, {cpu['logical_cpus']} CPUs",
             f"governor {', '.join(cpu['governors'])}" if cpu.get("governors") else None,
             fingerprint["kernel"].split(" #")[0],
             f"{box['runtime']} {box.get('image') or ''}".strip() if box else None]
    if gpu:
        names = [device["name"] for device in gpu["devices"]]
        parts += [f"driver {gpu['driver']}, CUDA {gpu['cuda_driver']}",
                  ", ".join(f"{names.count(name)}x {name}" for name in dict.fromkeys(names))]
    return "; ".join(part for part in parts if part)


def provenance(out_dir, records: List[Dict]) -> Dict:
    """Versions, devices, hosts, harness versions and time span of ``records``, with the
    commands and sweep file that OUT holds (empty where it holds none), the node fingerprints
    the records reference and the fields in which they differ (host names aside)."""
    out_dir = Path(out_dir)
    versions: Dict[str, set] = {}
    for record in records:
        for package, version in (record.get("versions") or {}).items():
            if version is not None:
                versions.setdefault(package, set()).add(str(version))
    started = sorted(r["started_at"] for r in records if r.get("started_at"))

    def values(key):
        return sorted({str(r[key]) for r in records if r.get(key)})

    commands, sweep = out_dir / COMMANDS_FILE, out_dir / SWEEP_FILE
    fingerprints = read_fingerprints(out_dir, records)
    return {
        "versions": {package: sorted(found) for package, found in sorted(versions.items())},
        "devices": values("device_name"),
        "cpus": values("cpu_model"),
        "hosts": sorted({h for r in records for h in (r.get("hosts") or [])} |
                        set(values("host"))),
        "harness_versions": values("harness_version"),
        "started": (started[0], started[-1]) if started else None,
        "commands": commands.read_text().splitlines() if commands.exists() else [],
        "sweep_file": sweep.read_text() if sweep.exists() else None,
        "fingerprints": [{"hash": name, "host": found["host"], "summary": describe(found)}
                         for name, found in fingerprints.items()],
        "fingerprint_differences": varying_fields(fingerprints.values()),
    }
