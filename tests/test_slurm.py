"""Sweeps under a real Slurm cluster of two nodes on this machine: job arrays, cells that span
nodes, states mapped to statuses, cancel and resume, requeue, a killed submitter, and hostile
names that stay inert."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import read_records, write_sweep
from slurmcluster import SlurmCluster, missing_binaries

from scaling.schema import RECORD_FIELDS
from scaling.slurm.queue import task_indices
from scaling.slurm.submit import render_script, sbatch_argv
from scaling.sweep import SlurmSection

GOLDEN = Path(__file__).parent / "golden"
TEMPLATE = (Path(__file__).resolve().parents[1] / "slurm" / "array.sbatch").read_text()
HOSTILE = "a'; touch PWNED; echo '"

@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if missing_binaries():
        pytest.skip(f"Slurm is not installed ({', '.join(missing_binaries())} missing; Debian: "
                    "apt-get install slurm-wlm munge, which make test does as root)")
    with SlurmCluster(tmp_path_factory.mktemp("slurm"), nodes=2) as running:
        yield running


def scaling(cluster, *args, timeout=900, env=None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scaling", *map(str, args)],
                          capture_output=True, text=True, env=env or cluster.env,
                          timeout=timeout, **kwargs)


def scaling_ok(cluster, *args, **kwargs) -> subprocess.CompletedProcess:
    result = scaling(cluster, *args, **kwargs)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def by_cell(records):
    cells = {}
    for record in records:
        cells.setdefault(record["cell"], []).append(record)
    return cells


def test_the_rendered_script_matches_the_golden_file():
    script = render_script(TEMPLATE, workdir="/opt/scaling", pythonpath="/opt/scaling",
                           python="/opt/scaling/.venv/bin/python", nodes=2,
                           out_dir=f"/runs/{HOSTILE}", group_file=f"/runs/{HOSTILE}/g.json")
    assert script == (GOLDEN / "array.sbatch").read_text()


def test_sbatch_options_are_one_list_with_every_resource():
    section = SlurmSection(partition="gpu", account="ml", qos="high", time="0:10:00",
                           constraint="h100", extra_args=["--exclusive"], parallel=4)
    argv = sbatch_argv(Path("/runs/x/job.sbatch"), job_name=HOSTILE, tasks=6, nodes=2,
                       cpus_per_task=16, gpus_per_node=8, section=section,
                       log_dir=Path("/runs/x/slurm"))
    assert argv == [
        "sbatch", "--parsable", f"--job-name={HOSTILE}", "--array=0-5%4", "--nodes=2",
        "--ntasks-per-node=1", "--cpus-per-task=16", "--time=0:10:00",
        "--output=/runs/x/slurm/%A_%a.out", "--open-mode=append", "--requeue",
        "--gpus-per-node=8", "--partition=gpu", "--account=ml", "--qos=high",
        "--constraint=h100", "--exclusive", "/runs/x/job.sbatch"]


def test_hostile_names_stay_inert_on_a_real_cluster(cluster, tmp_path):
    out = tmp_path / HOSTILE
    sweep = write_sweep(tmp_path / "sweep.yaml", name=HOSTILE)
    scaling_ok(cluster, "sweep", sweep, "--out", out, "--backend", "slurm", "--wait",
               cwd=tmp_path)
    [record] = read_records(out)
    assert record["status"] == "ok", record["error"]
    assert not list(tmp_path.rglob("PWNED")) and not Path("PWNED").exists()


def test_sweep_over_one_and_two_nodes_with_torchrun_and_tf_multiworker(cluster, tmp_path):
    sweep = write_sweep(tmp_path / "sweep.yaml", nodes=[1, 2], frameworks={
        "torch": {"launchers": ["torchrun"]},
        "tensorflow": {"launchers": ["tf-multiworker"]}})
    out = tmp_path / "out"
    result = scaling_ok(cluster, "sweep", sweep, "--out", out, "--backend", "slurm", "--wait")
    assert "4 submitted in 2 job array(s)" in result.stdout
    records = read_records(out)
    assert sorted((r["framework"], r["nodes"], r["status"]) for r in records) == [
        ("tensorflow", 1, "ok"), ("tensorflow", 2, "ok"), ("torch", 1, "ok"), ("torch", 2, "ok")]
    for record in records:
        assert set(record) == set(RECORD_FIELDS)
        assert record["slurm"]["job_id"] and len(record["slurm"]["nodes"]) == record["nodes"]
        if record["nodes"] == 2:
            assert record["timed_images"] == 4 * 2 * record["steps_timed"]
            assert len(record["peak_memory_bytes_per_rank"]) == 2
            assert {n["node"] for n in record["slurm"]["nodes"]} == {"n1", "n2"}
    status = scaling_ok(cluster, "status", out)
    assert "4 cells: 4 ok" in status.stdout


def test_horovod_cells_over_two_nodes_for_every_framework(cluster, tmp_path):
    sweep = write_sweep(tmp_path / "sweep.yaml", nodes=[2], frameworks={
        framework: {"launchers": ["horovod"]} for framework in ("torch", "tensorflow", "mxnet")})
    out = tmp_path / "out"
    scaling_ok(cluster, "sweep", sweep, "--out", out, "--backend", "slurm", "--wait")
    records = read_records(out)
    assert sorted((r["framework"], r["status"]) for r in records) == [
        ("mxnet", "ok"), ("tensorflow", "ok"), ("torch", "ok")], [r["error"] for r in records]
    for record in records:
        assert record["timed_images"] == 4 * 2 * record["steps_timed"]
        assert {n["node"] for n in record["slurm"]["nodes"]} == {"n1", "n2"}


def test_a_cell_past_its_time_limit_ends_as_timeout(cluster, tmp_path):
    sweep = write_sweep(tmp_path / "sweep.yaml", steps=1000, timeout_s=3600)
    out = tmp_path / "out"
    scaling_ok(cluster, "sweep", sweep, "--out", out, "--backend", "slurm", "--time", "1",
               "--wait", env={**cluster.env, "SCALING_FAULT": "hang@0:3"})
    [record] = read_records(out)
    assert record["status"] == "timeout"
    assert "ended TIMEOUT" in record["error"]


def test_cancel_part_way_then_resume_records_every_cell_once(cluster, tmp_path):
    sweep = write_sweep(tmp_path / "sweep.yaml", batch_sizes=[2, 3, 4, 5])
    out = tmp_path / "out"
    scaling_ok(cluster, "sweep", sweep, "--out", out, "--backend", "slurm", "--parallel", 1)
    deadline = time.monotonic() + 300
    while not (out / "results.jsonl").exists() and time.monotonic() < deadline:
        time.sleep(1)
    cancelled = scaling_ok(cluster, "cancel", out)
    assert "cancelled" in cancelled.stdout
    resumed = scaling_ok(cluster, "sweep", sweep, "--out", out, "--backend", "slurm",
                         "--resume", "--wait")
    assert "0 submitted" in resumed.stdout
    cells = by_cell(read_records(out))
    assert len(cells) == 4 and all(len(records) == 1 for records in cells.values())
    statuses = sorted(records[0]["status"] for records in cells.values())
    assert "ok" in statuses and "cancelled" in statuses
    assert set(statuses) <= {"ok", "cancelled"}


def test_a_requeued_task_records_once(cluster, tmp_path):
    sweep = write_sweep(tmp_path / "sweep.yaml", steps=40)
    out = tmp_path / "out"
    scaling_ok(cluster, "sweep", sweep, "--out", out, "--backend", "slurm")
    job = next((out / "slurm").glob("*.json")).stem
    job_id = subprocess.run(["squeue", "-h", "-n", job, "-o", "%F"], capture_output=True,
                            text=True, env=cluster.env).stdout.split()[0]
    deadline = time.monotonic() + 120
    while "RUNNING" not in subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"],
                                          capture_output=True, text=True,
                                          env=cluster.env).stdout:
        assert time.monotonic() < deadline
        time.sleep(0.5)
    time.sleep(3)
    subprocess.run(["scontrol", "requeue", f"{job_id}_0"], check=True, env=cluster.env)
    scaling_ok(cluster, "status", out, "--wait")
    [record] = read_records(out)
    assert record["status"] == "ok"


def test_a_killed_submitter_loses_and_repeats_nothing(cluster, tmp_path):
    sweep = write_sweep(tmp_path / "sweep.yaml", batch_sizes=[2, 3], nodes=[1, 2])
    out = tmp_path / "out"
    submitter = subprocess.Popen(
        [sys.executable, "-m", "scaling", "sweep", str(sweep), "--out", str(out), "--backend",
         "slurm", "--wait"], env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while len(list(out.glob("slurm/*.sbatch"))) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    time.sleep(2)  # submitted, now waiting for the cells
    os.kill(submitter.pid, signal.SIGKILL)
    submitter.wait()
    scaling_ok(cluster, "sweep", sweep, "--out", out, "--backend", "slurm", "--resume",
               "--wait")
    cells = by_cell(read_records(out))
    assert len(cells) == 4
    assert all(len(records) == 1 and records[0]["status"] == "ok"
               for records in cells.values())


def test_slurm_backend_without_slurm_is_a_one_line_error(tmp_path):
    sweep = write_sweep(tmp_path / "sweep.yaml")
    env = {**os.environ, "PATH": "/nonexistent"}
    result = subprocess.run([sys.executable, "-m", "scaling", "sweep", str(sweep), "--out",
                             str(tmp_path / "out"), "--backend", "slurm"],
                            capture_output=True, text=True, env=env)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "Error: --backend slurm needs Slurm's sbatch on PATH (Debian: apt-get install "
        "slurm-wlm); use --backend local to run here")


def test_cells_on_several_nodes_need_a_scheduler(tmp_path):
    sweep = write_sweep(tmp_path / "sweep.yaml", nodes=[1, 2])
    result = subprocess.run([sys.executable, "-m", "scaling", "sweep", str(sweep), "--out",
                             str(tmp_path / "out")], capture_output=True, text=True)
    assert result.returncode == 2
    assert "cells on 2 nodes need a scheduler: use --backend slurm" in result.stderr


def test_task_ranges_of_never_started_tasks_are_expanded():
    assert task_indices("3") == [3]
    assert task_indices("2-4,7%2") == [2, 3, 4, 7]
    assert task_indices("") == []


def test_a_max_batch_search_runs_as_one_job(cluster, tmp_path):
    out = tmp_path / "out"
    result = scaling_ok(cluster, "maxbatch", "--workload", "cifar10", "--image-size", 16,
                        "--devices", 1, "--min", 4, "--max", 8, "--multiple-of", 4,
                        "--memory-limit", "1.5GiB", "--out", out, "--backend", "slurm", "--wait")
    assert "ended COMPLETED" in result.stdout
    trials = read_records(out)
    assert trials and all(r["purpose"] == "maxbatch" for r in trials)
    assert "max_batch" in (out / "maxbatch.csv").read_text().splitlines()[0]
    assert len(list((out / "slurm").glob("*.sbatch"))) == 1


def test_a_bad_max_batch_search_is_refused_before_anything_is_submitted(cluster, tmp_path):
    result = scaling(cluster, "maxbatch", "--workload", "cifar10", "--devices", 1,
                     "--out", tmp_path / "out", "--backend", "slurm", "--wait")
    assert result.returncode == 2
    assert "on CPU devices the search needs --memory-limit" in result.stderr
    assert not (tmp_path / "out" / "slurm").exists()
