"""One-node jobs under a real Slurm cluster of two nodes on this machine: the example batch
script, max-batch searches as one job, a task requeued while it runs, a cell that shares its
node, default threads from the compute nodes, and a cell past its time limit.

The tests run in this file's order: they run on n1 while a cell hangs on n2 past Slurm's
smallest time limit (``one_node_jobs``), so that its minute passes beside them; the test that
reads that cell comes last."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cell_logs, read_records, write_sweep
from test_slurm import (SINGLE, check_measured, cluster, requeue_and_restart,  # noqa: F401
                        scaling, scaling_here, scaling_ok, start_cluster)
from waiting import wait_until

from scaling.maxbatch.search import read_maxbatch_csv
from scaling.slurm.queue import ACTIVE
from scaling.slurm.submit import read_ledger

EXAMPLE = Path(__file__).resolve().parents[1] / "slurm" / "sweep.sbatch"


def ended_job(cluster, job: str):
    """``scontrol``'s line for ``job`` once it has ended, else None."""
    shown = cluster.run("scontrol", "show", "job", "-o", job).stdout
    state = re.search(r"\bJobState=(\S+)", shown)
    return shown if state and state.group(1) not in ACTIVE else None


@pytest.fixture(scope="module")
def one_node_jobs(cluster, tmp_path_factory):
    """The file's jobs of one node, run once for the tests that read them: first a cell that
    hangs past Slurm's smallest time limit, a minute, submitted to n2 and not waited for, then,
    each waited for on n1 meanwhile, the example batch script's sweep and two max-batch
    searches. The minute passes beside them and the one-node tests that follow;
    ``test_a_cell_past_its_time_limit_ends_as_timeout``, last in the file, reads the cell.
    Each entry: the folder, and for a job waited for, what it said."""
    root = tmp_path_factory.mktemp("one-node")
    jobs = {"hung": root / "hung"}
    scaling_here(cluster, "sweep", write_sweep(root / "hung.yaml", frameworks=SINGLE,
                                               timeout_s=3600),
                 "--out", jobs["hung"], "--backend", "slurm", "--time", 1,
                 "--sbatch-arg=--nodelist=n2", SCALING_FAULT="hang@0:1")

    example = root / "example"
    example.mkdir()
    sweep = write_sweep(example / "sweep.yaml", frameworks=SINGLE, references="none")
    # Not sbatch --wait: it looks 2, 10 and 42 s after submitting, then every 32 s, and a
    # job of 16 s took it 42.
    submitted = subprocess.run(["sbatch", "--parsable", f"--chdir={example}",
                                f"--output={example}/%j.out", str(EXAMPLE), str(sweep),
                                str(example / "out")],
                               capture_output=True, text=True,
                               env={**cluster.env, "SCALING_PYTHON": sys.executable})
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    jobs["example"] = (example, wait_until(lambda: ended_job(cluster, job),
                                           f"job {job} ended", timeout=900))

    # The search stops at its maximum, which fits: one trial, then the answer's confirmations.
    out = root / "maxbatch"
    jobs["maxbatch"] = (out, scaling(
        cluster, "maxbatch", "--workload", "cifar10", "--image-size", 16, "--devices", 1,
        "--min", 4, "--max", 4, "--multiple-of", 4, "--steps", 1, "--warmup", 0,
        "--confirm-steps", 2, "--confirm-warmup", 1, "--memory-limit", "1.5GiB",
        "--out", out, "--backend", "slurm", "--wait"))

    # Every trial fails other than by OOM.
    out = root / "gave-up"
    jobs["gave_up"] = (out, scaling(
        cluster, "maxbatch", "--workload", "cifar10", "--image-size", 16, "--devices", 1,
        "--min", 4, "--max", 8, "--multiple-of", 4, "--steps", 1, "--warmup", 0,
        "--memory-limit", "1.5GiB", "--out", out, "--backend", "slurm", "--wait",
        env={**cluster.env, "SCALING_FAULT": "error@0:0"}))
    return jobs


@pytest.mark.slow
def test_the_example_batch_script_runs_a_sweep_in_one_allocation(one_node_jobs):
    folder, ended = one_node_jobs["example"]
    assert "JobState=COMPLETED" in ended and "ExitCode=0:0" in ended, ended + "".join(
        path.read_text() for path in folder.glob("*.out"))
    [record] = read_records(folder / "out")
    check_measured(record, 4)


@pytest.mark.slow
def test_a_max_batch_search_runs_as_one_job(one_node_jobs):
    out, result = one_node_jobs["maxbatch"]
    assert result.returncode == 0, result.stdout + result.stderr + cell_logs([out])
    assert "ended COMPLETED" in result.stdout
    trials = read_records(out)
    assert {r["purpose"] for r in trials} == {"maxbatch", "confirmation"}
    assert "max_batch" in (out / "maxbatch.csv").read_text().splitlines()[0]
    assert len(list((out / "slurm").glob("*.sbatch"))) == 1


@pytest.mark.slow
def test_a_max_batch_search_that_gives_up_under_slurm_exits_1(one_node_jobs):
    """Every trial fails other than by OOM: the job's search gives up on its first batch, and
    the submitter, reading the job's table, exits as a local search would."""
    out, result = one_node_jobs["gave_up"]
    assert result.returncode == 1, result.stdout + result.stderr + cell_logs([out])
    assert "ended FAILED" in result.stdout
    [row] = read_maxbatch_csv(out)
    assert (row["status"], row["failed_batch"], row["trials"]) == ("error", "4", "2")


@pytest.mark.slow
def test_a_task_requeued_while_it_runs_records_once_from_its_second_run(cluster, tmp_path):
    """The cell's window lasts 3 s, after its interpreter and framework start: the requeue,
    as soon as the cell has started, comes well within its first run. The second run starts
    as ``requeue_and_restart`` says. The window's steps are planned on the warm-up's pace: under the
    load of a full test run its 6 ms steps ran up to ten times slower, so the cell's timeout is
    left wide, as it is no part of what the test shows."""
    sweep = write_sweep(tmp_path / "sweep.yaml", frameworks=SINGLE, min_time_s=3,
                        timeout_s=900, references="none")
    out = tmp_path / "out"
    scaling_here(cluster, "sweep", sweep, "--out", out, "--backend", "slurm")
    wait_until(lambda: list(out.glob("cells/*/launcher.log")), "cell started")
    [job] = read_ledger(out).values()
    task = f"{job['job_id']}_0"
    requeue_and_restart(cluster, out, task)
    scaling_ok(cluster, "status", out, "--wait")
    [record] = read_records(out)
    check_measured(record, 4, min_time=True)
    assert record["slurm"]["restart_count"] == 1


@pytest.mark.slow
def test_a_shared_cell_is_marked_and_flagged_for_another_job_on_its_node(cluster, tmp_path):
    """A foreign job that holds one core of node n1 (asleep: what marks the cell is Slurm's
    word that another job runs there); the cell, submitted --shared, takes the other core."""
    busy = cluster.run("sbatch", "--parsable", "--nodelist=n1", "--cpus-per-task=1",
                       f"--output={tmp_path / 'busy.out'}", "--wrap=exec sleep 3600")
    assert busy.returncode == 0, busy.stderr
    job = busy.stdout.strip()
    try:
        wait_until(lambda: cluster.run("squeue", "-h", "-j", job, "-o", "%T").stdout.strip()
                   == "RUNNING", "the foreign job running")
        out = tmp_path / "out"
        scaling_ok(cluster, "sweep", write_sweep(tmp_path / "sweep.yaml", frameworks=SINGLE,
                                                 threads_per_device=1, references="none"),
                   "--out", out, "--backend", "slurm", "--shared", "--sbatch-arg=--nodelist=n1",
                   "--wait")
    finally:
        cluster.run("scancel", job)
    [record] = read_records(out)
    assert record["status"] == "ok"
    assert not record["slurm"]["exclusive"] and record["slurm"]["other_jobs"] == [job]
    assert record["noisy"] and f"other Slurm jobs ran on its nodes: {job}" in record["noise"]


@pytest.mark.slow
def test_default_threads_come_from_the_compute_nodes_not_the_submitting_host(tmp_path):
    """Nodes of one CPU, on a host of more: a cell that names no threads gets one. The curve's
    one-node cell and its baseline, run before and after it, all run on one of the two nodes,
    in that order."""
    assert os.cpu_count() > 1
    with start_cluster(tmp_path / "cluster", cpus_per_node=1) as small:
        out = tmp_path / "out"
        scaling_ok(small, "sweep", write_sweep(tmp_path / "sweep.yaml", single_baseline=True,
                                               references="none"),
                   "--out", out, "--backend", "slurm", "--wait")
    records = read_records(out)
    assert [(r["launcher"], r["repeat"]) for r in records] == [
        ("single", 0), ("torchrun", 0), ("single", 1)]
    assert {(r["threads_per_device"], r["threads_default"]) for r in records} == {(1, True)}
    assert len({r["slurm"]["node_list"] for r in records}) == 1
    assert {r["slurm"]["job_id"] for r in records} == {records[0]["slurm"]["job_id"]}


@pytest.mark.slow
def test_a_cell_past_its_time_limit_ends_as_timeout(cluster, one_node_jobs):
    """Slurm's smallest time limit is a minute: the cell hangs past it (on n2, since the start
    of ``one_node_jobs``)."""
    out = one_node_jobs["hung"]
    scaling_ok(cluster, "status", out, "--wait", exit_code=1)
    [record] = read_records(out)
    assert record["status"] == "timeout"
    assert "ended TIMEOUT" in record["error"]
