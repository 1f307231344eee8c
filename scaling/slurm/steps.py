"""Inside a whole-sweep allocation: its first node runs the group file's cells one after
another, each as an ``srun`` step (``scaling slurm-task``) on the allocation's first nodes, as
many as the cell needs, so a curve's ``single`` cell and its one-node cells run on the first
node of its multi-node cells.

With a preflight, a step over every node checks them first (``scaling.slurm.preflight``) and
the cells use only the nodes it does not flag, in the allocation's order; a cell that needs
more than those is not run, and stays unrecorded for ``--resume``.

Each step is noted in ``OUT/slurm/NAME.steps.jsonl`` as it starts (``scaling status`` reads
which cell runs). A cell already recorded is skipped, so a requeued allocation goes on where
the last run stopped. A step that Slurm did not start (the controller down or restarting, or
still holding the step that ended during its outage) is started again once the controller
answers, for up to ``STEP_PATIENCE_S``; a step that started and ended without a record (a
rank's node crashed) is recorded ``crashed`` here, with srun's exit status. A cancelled, requeued
or timed-out allocation is killed with its step: nothing is recorded for that cell.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

from scaling.cell import Cell
from scaling.execute import preflight as check
from scaling.execute.store import ResultStore, locked_append
from scaling.slurm import controller
from scaling.slurm.environment import JobEnvironment, hostnames
from scaling.slurm.preflight import NODES_DIR
from scaling.slurm.queue import patiently, record_without_run
from scaling.slurm.submit import steps_file
from scaling.slurm.task import STARTED, UNTIL_ANSWERED

POLL_S = 3.0
STEP_PATIENCE_S = 180.0
"""How long a step that Slurm will not start is started again, every ``POLL_S`` once the
controller answers, before it is recorded as the cell's crash. A restarted controller refuses
new steps until it hears that the step running through its outage has ended: seconds."""


def say(text: str) -> None:
    print(f"scaling allocation: {text}", flush=True)


def srun_argv(nodes: List[str], env, *command: str) -> List[str]:
    """``srun`` of ``scaling COMMAND`` once on each of ``nodes``."""
    return ["srun", f"--nodes={len(nodes)}", f"--ntasks={len(nodes)}", "--ntasks-per-node=1",
            f"--nodelist={','.join(nodes)}",
            f"--cpus-per-task={env.get('SLURM_CPUS_PER_TASK', '1')}", "--kill-on-bad-exit=1",
            sys.executable, "-m", "scaling", *command]


def started_step(argv: List[str], started) -> Optional[subprocess.CompletedProcess]:
    """Run the step ``argv`` until Slurm starts it (``started()`` tells), each try once the
    controller answers, for up to ``STEP_PATIENCE_S``; its completed process, or None when Slurm
    would not start it."""
    refused_since = None
    while True:
        patiently(controller.ping, POLL_S, UNTIL_ANSWERED)
        ran = subprocess.run(argv, stderr=subprocess.PIPE, text=True)
        sys.stderr.write(ran.stderr)
        if ran.returncode == 0 or started():
            return ran
        if refused_since is None:
            refused_since = time.monotonic()
            say(f"Slurm did not start the step ({controller.one_line(ran.stderr)}); trying "
                f"again every {POLL_S:g} s for up to {STEP_PATIENCE_S:g} s")
        elif time.monotonic() - refused_since > STEP_PATIENCE_S:
            return None
        time.sleep(POLL_S)


def run_cell_step(out_dir: Path, name: str, group_file: str, index: int, fields: Dict,
                  nodes: List[str], env) -> None:
    """Cell ``index`` of the group as one step on ``nodes``; its record, one way or another,
    unless the allocation is killed meanwhile."""
    cell = Cell(**fields)
    marker = out_dir / "cells" / cell.cell_id / STARTED
    marker.unlink(missing_ok=True)
    locked_append(steps_file(out_dir, name), {
        "cell": cell.cell_id, "index": index, "nodes": nodes,
        "restart_count": JobEnvironment.read(env).restart_count})
    say(f"{cell.cell_id} on {','.join(nodes)}")
    ran = started_step(srun_argv(nodes, env, "slurm-task", str(out_dir), group_file,
                                 str(index)), marker.exists)
    store = ResultStore(out_dir)
    if cell.cell_id in store.done():
        return
    job_id = JobEnvironment.read(env).job_id
    error = (f"Slurm did not start its step in allocation {job_id}" if ran is None else
             f"its srun step in allocation {job_id} exited {ran.returncode} without a record")
    store.append_once(record_without_run(out_dir, fields, {"status": "crashed", "error": error}, {
        "job_id": job_id, "array_task_id": 0, "allocation": "one",
        "node_list": ",".join(nodes), "job_node_list": JobEnvironment.read(env).job_nodelist}))


def preflight_nodes(out_dir: Path, group_file: str, nodes: List[str], env) -> List[str]:
    """Every node checked in one step; those the verdict does not flag (none without a
    verdict)."""
    (out_dir / check.PREFLIGHT_FILE).unlink(missing_ok=True)
    shutil.rmtree(out_dir / NODES_DIR, ignore_errors=True)
    started_step(srun_argv(nodes, env, "slurm-task", str(out_dir), group_file, "0"),
                 lambda: (out_dir / NODES_DIR).exists())
    verdict = check.read_preflight(out_dir)
    if not verdict:
        say("the preflight gave no verdict: no cell runs")
        return []
    if verdict["flagged"]:
        say(f"the preflight flagged {verdict['exclude']}: the cells keep off it")
    return [node for node in nodes if node in verdict["good"]]


def run_allocation(out_dir, group_file: str, env=os.environ) -> int:
    """Every unrecorded cell of ``group_file``, in its order; 0, or 1 when a cell was left
    unrun for want of good nodes."""
    out_dir = Path(out_dir)
    group = json.loads(Path(group_file).read_text())
    nodes = hostnames(JobEnvironment.read(env).job_nodelist)
    if group.get("preflight_group"):
        nodes = preflight_nodes(out_dir, group["preflight_group"], nodes, env)
    left = 0
    for index, fields in enumerate(group["cells"]):
        cell = Cell(**fields)
        if cell.cell_id in ResultStore(out_dir).done():
            continue
        if cell.nodes > len(nodes):
            say(f"{cell.cell_id} needs {cell.nodes} node(s) and {len(nodes)} passed the "
                "preflight: not run, left for --resume")
            left += 1
            continue
        run_cell_step(out_dir, Path(group_file).stem, group_file, index, fields,
                      nodes[:cell.nodes], env)
    return 1 if left else 0
