"""Several run folders side by side: each run's name, host and date, and what its machines were.

A run is one output folder, named by the folder (by its path where two folders share a name).
Its label, ``NAME (HOST, DATE)``, names the hosts its records ran on and the day or days its
cells started. The runs' machines are set side by side, one row per field: the hosts, CPU,
devices, harness and package versions the records name, then every field of the node
fingerprints the records reference (the host aside, named already). Where a run holds several
fingerprints (several nodes), a field shows each value they have; where it holds none (a folder
written before fingerprints), its fingerprint fields are ``-``. A field whose values differ
between the runs is marked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Tuple

from scaling.errors import ScalingError
from scaling.execute.fingerprint import IDENTITY, flatten, read_fingerprints
from scaling.execute.store import ResultStore
from scaling.report.provenance import provenance
from scaling.report.tables import with_scaling


@dataclass
class Run:
    """One output folder: its records, its sweep rows (each naming the run in ``run``) with
    speedup and efficiency against the run's own baselines, and its ``facts``: the
    :func:`~scaling.report.provenance.provenance` of its records."""

    name: str
    path: Path
    records: List[Dict]
    rows: List[Dict]
    facts: Dict

    @property
    def hosts(self) -> str:
        return ", ".join(self.facts["hosts"]) or "host unknown"

    @property
    def dates(self) -> str:
        """The day its cells started, or ``FIRST to LAST`` over several days."""
        started = self.facts["started"]
        if not started:
            return "date unknown"
        first, last = (stamp[:10] for stamp in started)
        return first if first == last else f"{first} to {last}"

    @property
    def label(self) -> str:
        return f"{self.name} ({self.hosts}, {self.dates})"


def run_names(paths: List[Path]) -> List[str]:
    """Each folder's name, or its path as given where two folders share a name."""
    names = [path.name for path in paths]
    if len(set(names)) < len(names):
        return [str(path) for path in paths]
    return names


def run_records(out_dirs) -> List[Tuple[str, Path, List[Dict]]]:
    """(name, folder, records) of each of ``out_dirs``; a one-line error for a folder given
    twice or without results."""
    paths = [Path(out_dir) for out_dir in out_dirs]
    seen = set()
    for path in paths:
        if path.resolve() in seen:
            raise ScalingError(f"{path} is given twice; name each run folder once")
        seen.add(path.resolve())
    found = []
    for path, name in zip(paths, run_names(paths)):
        records = ResultStore(path).records()
        if not records:
            raise ScalingError(f"no results in {path}")
        found.append((name, path, records))
    return found


def load_runs(out_dirs) -> List[Run]:
    """The runs of ``out_dirs`` (see :func:`run_records`)."""
    return [Run(name, path, records, [{**row, "run": name} for row in with_scaling(records)],
                provenance(path, records)) for name, path, records in run_records(out_dirs)]


def _text(value: str) -> str:
    """A flattened fingerprint leaf (JSON text) as a reader wants it: strings bare, null -."""
    found = json.loads(value)
    if found is None:
        return "-"
    return found if isinstance(found, str) else json.dumps(found)


def fingerprint_fields(run: Run) -> Dict[str, str]:
    """Each field of the run's fingerprints, host aside, with the values it has over them."""
    values: Dict[str, set] = {}
    for fingerprint in read_fingerprints(run.path, run.records).values():
        for name, value in flatten(fingerprint).items():
            if name not in IDENTITY:
                values.setdefault(name, set()).add(_text(value))
    return {name: ", ".join(sorted(found)) for name, found in values.items()}


def side_by_side(runs: List[Run]) -> List[Dict]:
    """One line per field: ``field``, ``values`` (one text per run, ``-`` where a run has
    none) and ``differs`` (whether the values are not all the same)."""
    facts = [{"hosts": ", ".join(run.facts["hosts"]), "CPU": ", ".join(run.facts["cpus"]),
              "devices": ", ".join(run.facts["devices"]),
              "harness": ", ".join(run.facts["harness_versions"]),
              **{package: ", ".join(found) for package, found in run.facts["versions"].items()}}
             for run in runs]
    prints = [fingerprint_fields(run) for run in runs]
    names = list(dict.fromkeys(name for found in facts for name in found))
    names += sorted({f"fingerprint: {name}" for found in prints for name in found})
    merged = [{**found, **{f"fingerprint: {name}": value for name, value in extra.items()}}
              for found, extra in zip(facts, prints)]
    lines = []
    for name in names:
        values = [found.get(name) or "-" for found in merged]
        lines.append({"field": name, "values": values, "differs": len(set(values)) > 1})
    return lines
