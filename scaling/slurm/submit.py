"""Submitting cells to Slurm: one job array per group of cells that need the same resources,
one array task per cell; the one-node cells that share a baseline form one array of their own,
pinned to one node, so that they run there in the order the sweep gives.

The batch script comes from ``scaling/slurm/array.sbatch``, rendered by a pure function that quotes
every value, and resources are sbatch options in an argv list (no shell anywhere), so hostile
names (an output folder or sweep called ``a'; rm -rf ~``) stay inert. Before each ``sbatch``
the submission is noted in ``OUT/slurm/jobs.jsonl`` under a unique job name, and its job id
after; a submitter killed in between is found again by that name, so a resumed sweep neither
loses nor submits twice a cell.
"""

from __future__ import annotations

import datetime
import json
import shlex
import shutil
import string
import sys
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from scaling import PROJECT_ROOT
from scaling.cell import Cell
from scaling.errors import InfrastructureError
from scaling.execute.monitor import WatchSettings
from scaling.execute.store import locked_append
from scaling.slurm import controller
from scaling.sweep import SlurmSection, single_twin

TEMPLATE = Path(__file__).with_name("array.sbatch")
"""The batch script, package data: it ships with the package, so an installed harness submits."""
SLURM_DIR = "slurm"
LEDGER = "jobs.jsonl"


def require_slurm() -> None:
    if shutil.which("sbatch") is None:
        raise InfrastructureError("--backend slurm needs Slurm's sbatch on PATH (Debian: apt-get "
                           "install slurm-wlm); use --backend local to run here")


def render_script(template: str, *, workdir: str, pythonpath: str, python: str, nodes: int,
                  out_dir: str, group_file: str) -> str:
    """The batch script: ``template`` with every value shell-quoted."""
    values = {"workdir": workdir, "pythonpath": pythonpath, "python": python,
              "nodes": str(nodes), "out_dir": out_dir, "group_file": group_file}
    return string.Template(template).substitute(
        {key: shlex.quote(value) for key, value in values.items()})


def resources(cell: Cell, section: SlurmSection) -> Tuple:
    """What an array's cells share: nodes, GPUs per node, CPUs per task."""
    gpus = (section.gpus_per_node or cell.devices) if cell.device_type == "gpu" else None
    cpus = section.cpus_per_task or cell.devices * cell.threads_per_device
    return cell.nodes, gpus, cpus


def widest(cells: Sequence[Cell], section: SlurmSection) -> Tuple:
    """The resources of one array whose tasks are ``cells``: the most any of them needs."""
    needs = [resources(cell, section) for cell in cells]
    gpus = [need[1] for need in needs if need[1]]
    return max(need[0] for need in needs), max(gpus) if gpus else None, \
        max(need[2] for need in needs)


def baseline_group(cell: Cell) -> str:
    """The id shared by the cells measured against one baseline (their ``single`` twin)."""
    return single_twin(cell).with_changes(repeat=0).cell_id


def pinned_nodes(cells: Sequence[Cell], nodes: Sequence[str]) -> Dict[str, str]:
    """Baseline group -> the node its one-node cells are pinned to, so that a curve's one-node
    points and their baseline are measured on one node: the groups of ``cells`` (the whole
    sweep, so that a resumed sweep pins as the first submission did) in their order, round
    the ``nodes``. Empty without nodes to choose from."""
    groups = dict.fromkeys(baseline_group(cell) for cell in cells if cell.nodes == 1)
    return {group: nodes[index % len(nodes)] for index, group in enumerate(groups)} \
        if nodes else {}


def names_nodes(section: SlurmSection) -> bool:
    """Whether the user's own sbatch arguments already say which nodes to use."""
    return any(arg.startswith(("--nodelist", "-w")) for arg in section.extra_args)


def sbatch_argv(script: Path, *, job_name: str, tasks: int, nodes: int, cpus_per_task: int,
                gpus_per_node: Optional[int], section: SlurmSection, log_dir: Path,
                nodelist: Optional[str] = None) -> List[str]:
    """``sbatch`` and its options, as a list: one array of ``tasks`` tasks (on ``nodelist``
    where given)."""
    array = f"0-{tasks - 1}" + (f"%{section.parallel}" if section.parallel else "")
    argv = ["sbatch", "--parsable", f"--job-name={job_name}", f"--array={array}",
            f"--nodes={nodes}", "--ntasks-per-node=1", f"--cpus-per-task={cpus_per_task}",
            f"--time={section.time}", f"--output={log_dir / '%A_%a.out'}",
            "--open-mode=append", "--requeue", *([] if section.shared else ["--exclusive"])]
    if gpus_per_node:
        argv.append(f"--gpus-per-node={gpus_per_node}")
    if nodelist:
        argv.append(f"--nodelist={nodelist}")
    elif section.exclude:
        argv.append(f"--exclude={','.join(section.exclude)}")
    for option in ("partition", "account", "qos", "constraint"):
        if getattr(section, option):
            argv.append(f"--{option}={getattr(section, option)}")
    return [*argv, *section.extra_args, str(script)]


def read_ledger(out_dir) -> Dict[str, Dict]:
    """Submissions by job name: ``cells`` (ids, in array order), ``group_file`` and ``job_id``
    (None while only the intent to submit was noted)."""
    path = Path(out_dir) / SLURM_DIR / LEDGER
    jobs: Dict[str, Dict] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            jobs.setdefault(entry["name"], {}).update(
                {key: value for key, value in entry.items() if value is not None})
    for job in jobs.values():
        job.setdefault("job_id", None)
    return jobs


def note(out_dir, entry: Dict) -> None:
    locked_append(Path(out_dir) / SLURM_DIR / LEDGER, entry)


def steps_file(out_dir, name: str) -> Path:
    """Where the whole-sweep allocation ``name`` notes each step as it starts one."""
    return Path(out_dir) / SLURM_DIR / f"{name}.steps.jsonl"


def steps_started(out_dir, name: str) -> List[str]:
    """The cells whose steps the allocation ``name`` started, in order (a requeued allocation
    adds its own)."""
    path = steps_file(out_dir, name)
    if not path.exists():
        return []
    cells = []
    for line in path.read_text().splitlines():
        try:
            cells.append(json.loads(line)["cell"])
        except (ValueError, KeyError):
            continue
    return cells


def submit_cells(cells: Sequence[Cell], out_dir, section: SlurmSection, label: str,
                 pythons: Optional[Dict[str, str]] = None,
                 watch: WatchSettings = WatchSettings(),
                 sweep: Optional[Sequence[Cell]] = None) -> List[Dict]:
    """Submit ``cells`` (of ``sweep``, default: those), one array per resource group, and one
    per baseline's one-node cells pinned to a node (:func:`pinned_nodes`); returns the ledger
    entries."""
    allowed = [node for node in controller.node_names(section.partition)
               if node not in section.exclude]
    pins = {} if names_nodes(section) else pinned_nodes(sweep or cells, allowed)
    groups: Dict[Tuple, List[Cell]] = {}
    for cell in cells:
        node = pins.get(baseline_group(cell)) if cell.nodes == 1 else None
        groups.setdefault((node,) if node else resources(cell, section), []).append(cell)
    submitted = []
    for key, members in groups.items():
        nodes, gpus, cpus = widest(members, section)
        node = key[0] if len(key) == 1 else None
        group = {"cells": [cell.to_dict() for cell in members], "pythons": pythons or {},
                 "watch": asdict(watch), "exclusive": not section.shared}
        submitted.append(submit_array(
            out_dir, label, group, {"cells": [cell.cell_id for cell in members]}, section,
            tasks=len(members), nodes=nodes, gpus_per_node=gpus, cpus_per_task=cpus,
            nodelist=node))
    return submitted


def submit_command(argv: List[str], out_dir, section: SlurmSection, label: str,
                   gpus_per_node: Optional[int], cpus_per_task: int) -> Dict:
    """Submit one ``scaling ARGV`` command as a one-task array on one node (a max-batch
    search, whose trials depend on each other and so run in one job)."""
    return submit_array(out_dir, label, {"command": list(argv)},
                        {"cells": [], "command": list(argv)}, section, tasks=1, nodes=1,
                        gpus_per_node=gpus_per_node, cpus_per_task=cpus_per_task)


def submit_array(out_dir, label: str, group: Dict, noted: Dict, section: SlurmSection, *,
                 tasks: int, nodes: int, gpus_per_node: Optional[int],
                 cpus_per_task: int, nodelist: Optional[str] = None,
                 template: Path = TEMPLATE) -> Dict:
    """Write ``group`` (what the array tasks run) and its batch script (from ``template``) to
    ``OUT/slurm/``, note the submission (with ``noted``) in the ledger, ``sbatch`` it and note
    its job id; returns the ledger entry."""
    require_slurm()
    out_dir = Path(out_dir).resolve()
    slurm_dir = out_dir / SLURM_DIR
    slurm_dir.mkdir(parents=True, exist_ok=True)
    name = f"scaling-{label}-{uuid.uuid4().hex[:8]}"
    group_file = slurm_dir / f"{name}.json"
    group_file.write_text(json.dumps(group, indent=1))
    script = slurm_dir / f"{name}.sbatch"
    script.write_text(render_script(
        template.read_text(), workdir=str(PROJECT_ROOT), pythonpath=str(PROJECT_ROOT),
        python=sys.executable, nodes=nodes, out_dir=str(out_dir), group_file=str(group_file)))
    entry = {"name": name, "group_file": str(group_file), **noted,
             "noted_at": datetime.datetime.now(datetime.timezone.utc).isoformat()}
    note(out_dir, entry)
    entry["job_id"] = controller.sbatch(sbatch_argv(
        script, job_name=name, tasks=tasks, nodes=nodes, cpus_per_task=cpus_per_task,
        gpus_per_node=gpus_per_node, section=section, log_dir=slurm_dir, nodelist=nodelist),
        name)
    note(out_dir, {"name": name, "job_id": entry["job_id"]})
    return entry
