"""What the harness writes for Slurm and reads back from it, checked without a cluster: the
batch script, the sbatch command line, and strict parsing of sbatch's and squeue's answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from scaling.errors import InfrastructureError
from scaling.slurm.controller import parse_job_id, parse_squeue, task_indices
from scaling.slurm.submit import TEMPLATE, render_script, sbatch_argv
from scaling.sweep import SlurmSection

GOLDEN = Path(__file__).parent / "golden"
HOSTILE = "a'; touch PWNED; echo '"


def test_the_rendered_script_matches_the_golden_file():
    script = render_script(TEMPLATE.read_text(), workdir="/opt/scaling",
                           pythonpath="/opt/scaling", python="/opt/scaling/.venv/bin/python",
                           nodes=2, out_dir=f"/runs/{HOSTILE}",
                           group_file=f"/runs/{HOSTILE}/g.json")
    assert script == (GOLDEN / "array.sbatch").read_text()


def test_sbatch_options_are_one_list_with_every_resource_and_whole_nodes_unless_shared():
    section = SlurmSection(partition="gpu", account="ml", qos="high", time="0:10:00",
                           constraint="h100", extra_args=["--mail-type=END"], parallel=4)
    argv = sbatch_argv(Path("/runs/x/job.sbatch"), job_name=HOSTILE, tasks=6, nodes=2,
                       cpus_per_task=16, gpus_per_node=8, section=section,
                       log_dir=Path("/runs/x/slurm"))
    assert argv == [
        "sbatch", "--parsable", f"--job-name={HOSTILE}", "--array=0-5%4", "--nodes=2",
        "--ntasks-per-node=1", "--cpus-per-task=16", "--time=0:10:00",
        "--output=/runs/x/slurm/%A_%a.out", "--open-mode=append", "--requeue", "--exclusive",
        "--gpus-per-node=8", "--partition=gpu", "--account=ml", "--qos=high",
        "--constraint=h100", "--mail-type=END", "/runs/x/job.sbatch"]
    shared = sbatch_argv(Path("/runs/x/job.sbatch"), job_name="x", tasks=1, nodes=1,
                         cpus_per_task=1, gpus_per_node=None,
                         section=SlurmSection(shared=True), log_dir=Path("/runs/x/slurm"))
    assert "--exclusive" not in shared


def test_job_ids_are_read_strictly():
    assert parse_job_id("4107\n") == "4107"
    assert parse_job_id("4107;gpu-cluster") == "4107"
    for answer in ("", "Submitted batch job 4107", "4107;a;b", "41o7", "4107_2"):
        with pytest.raises(InfrastructureError, match="sbatch answered"):
            parse_job_id(answer)
    assert parse_squeue("12_0|RUNNING\n12_3|PENDING\n") == {("12", 0): "RUNNING",
                                                             ("12", 3): "PENDING"}
    for answer in ("12|RUNNING", "12_[1-3]|PENDING", "12_1", "squeue: error: x"):
        with pytest.raises(InfrastructureError, match=f"squeue answered '{answer}'"):
            parse_squeue(answer)


def test_task_ranges_of_never_started_tasks_are_expanded():
    assert task_indices("3") == [3]
    assert task_indices("2-4,7%2") == [2, 3, 4, 7]
    assert task_indices("") == []
