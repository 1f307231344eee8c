"""Sweeps under a real Slurm cluster of two nodes on this machine: job arrays, cells that span
nodes, states mapped to statuses, requeue, a killed submitter, hostile names that stay inert, a
task that vanishes, and strict reading of what Slurm answers. Cancel and resume, and a
controller that goes down, are the backends' contract (tests/test_backend_contract.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import (check_images_per_sec, cell_logs, processes_mentioning, read_records,
                      write_sweep)
from slurmcluster import SlurmCluster, missing_binaries, wait_until

from scaling.cli import cli
from scaling.schema import RECORD_FIELDS
from scaling.slurm.queue import VANISH_GRACE_ENV
from scaling.maxbatch.search import read_maxbatch_csv
from scaling.slurm.submit import read_ledger

EXAMPLE = Path(__file__).resolve().parents[1] / "slurm" / "sweep.sbatch"
HOSTILE = "a'; touch PWNED; echo '"


def start_cluster(root: Path, cpus_per_node: int = 2) -> SlurmCluster:
    if missing_binaries():
        pytest.skip(f"Slurm is not installed ({', '.join(missing_binaries())} missing; Debian: "
                    "apt-get install slurm-wlm munge, which make test does as root)")
    return SlurmCluster(root, nodes=2, cpus_per_node=cpus_per_node)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with start_cluster(tmp_path_factory.mktemp("slurm")) as running:
        yield running


@pytest.fixture
def own_cluster(tmp_path):
    """A cluster of this test's own, for a test that stops or wipes its controller."""
    with start_cluster(tmp_path / "cluster") as running:
        yield running


def scaling(cluster, *args, timeout=900, env=None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scaling", *map(str, args)],
                          capture_output=True, text=True, env=env or cluster.env,
                          timeout=timeout, **kwargs)


def scaling_here(cluster, *args, exit_code=0, **env):
    """The command line in this process (it starts in a fraction of the time), against
    ``cluster`` unless that is None."""
    result = CliRunner(env={**({"SLURM_CONF": str(cluster.conf)} if cluster else {}), **env}
                       ).invoke(cli, list(map(str, args)))
    assert result.exit_code == exit_code, result.output
    return result


def scaling_ok(cluster, *args, exit_code=0, **kwargs) -> subprocess.CompletedProcess:
    """``scaling`` for a command that must end with ``exit_code``: 0, or 1 where a cell fails
    on purpose."""
    result = scaling(cluster, *args, **kwargs)
    assert result.returncode == exit_code, result.stdout + result.stderr + cell_logs(args)
    return result


def by_cell(records):
    cells = {}
    for record in records:
        cells.setdefault(record["cell"], []).append(record)
    return cells


def task_states(cluster, out: Path) -> list:
    """The Slurm states of the folder's array tasks."""
    names = ",".join(path.stem for path in (out / "slurm").glob("*.sbatch"))
    return cluster.run("squeue", "-h", "-r", f"--name={names}", "-o", "%T").stdout.split()


def check_measured(record, batch: int, min_time: bool = False) -> None:
    """An ok record whose figure is the images the sweep asked for, the global ``batch`` over
    write_sweep's 3 steps (under a minimum time, the whole steps that filled it), over its
    ranks' own windows."""
    assert record["status"] == "ok", record["error"]
    steps = record["steps_timed"] if min_time else 3
    assert steps >= 3
    check_images_per_sec(record, batch * steps)


@pytest.fixture(scope="module")
def two_node_sweep(cluster, tmp_path_factory):
    """One sweep, run once for the tests that read it: torchrun and tf-multiworker on one and
    two nodes, in a folder and under a sweep name that are shell code."""
    root = tmp_path_factory.mktemp("hostile")
    sweep = write_sweep(root / "sweep.yaml", name=HOSTILE, nodes=[1, 2], frameworks={
        "torch": {"launchers": ["torchrun"]}, "tensorflow": {"launchers": ["tf-multiworker"]}})
    result = scaling_ok(cluster, "sweep", sweep, "--out", root / HOSTILE, "--backend", "slurm",
                        "--wait", cwd=root)
    return root, result


@pytest.mark.slow
def test_sweep_over_one_and_two_nodes_with_torchrun_and_tf_multiworker(two_node_sweep):
    root, result = two_node_sweep
    # one array for each framework's one-node cells (pinned, with their baseline, to a node),
    # one for the cells over two nodes
    assert "4 submitted in 3 job array(s)" in result.stdout
    records = read_records(root / HOSTILE)
    assert sorted((r["framework"], r["nodes"], r["status"]) for r in records) == [
        ("tensorflow", 1, "ok"), ("tensorflow", 2, "ok"), ("torch", 1, "ok"), ("torch", 2, "ok")]
    for record in records:
        assert set(record) == set(RECORD_FIELDS) - {"ray"}
        assert record["slurm"]["job_id"] and len(record["slurm"]["nodes"]) == record["nodes"]
        assert record["slurm"]["exclusive"] and record["slurm"]["other_jobs"] == []
        check_measured(record, 4 * record["nodes"])
        if record["nodes"] == 2:
            assert len(record["peak_memory_bytes_per_rank"]) == 2
            assert {n["node"] for n in record["slurm"]["nodes"]} == {"n1", "n2"}


@pytest.mark.slow
def test_hostile_names_stay_inert_on_a_real_cluster(two_node_sweep):
    root, _ = two_node_sweep
    assert (root / HOSTILE / "results.jsonl").exists()
    assert not list(root.rglob("PWNED")) and not Path("PWNED").exists()


@pytest.mark.slow
def test_status_lists_every_recorded_cell(cluster, two_node_sweep):
    root, _ = two_node_sweep
    assert "4 cells: 4 ok" in scaling_ok(cluster, "status", root / HOSTILE).stdout


@pytest.mark.slow
def test_horovod_cells_over_two_nodes_for_every_framework(cluster, tmp_path):
    sweep = write_sweep(tmp_path / "sweep.yaml", nodes=[2], references="none", frameworks={
        framework: {"launchers": ["horovod"]} for framework in ("torch", "tensorflow", "mxnet")})
    out = tmp_path / "out"
    scaling_ok(cluster, "sweep", sweep, "--out", out, "--backend", "slurm", "--wait")
    records = read_records(out)
    assert sorted((r["framework"], r["status"]) for r in records) == [
        ("mxnet", "ok"), ("tensorflow", "ok"), ("torch", "ok")], [r["error"] for r in records]
    for record in records:
        assert record["timed_images"] == 4 * 2 * record["steps_timed"]
        assert {n["node"] for n in record["slurm"]["nodes"]} == {"n1", "n2"}


@pytest.mark.slow
def test_a_jax_distributed_cell_over_two_nodes(cluster, tmp_path):
    pytest.importorskip("jax", reason="JAX is not installed (pip install -e '.[jax]')")
    sweep = write_sweep(tmp_path / "sweep.yaml", nodes=[2], references="none", frameworks={
        "jax": {"launchers": ["jax-distributed"]}})
    out = tmp_path / "out"
    scaling_ok(cluster, "sweep", sweep, "--out", out, "--backend", "slurm", "--wait")
    [record] = read_records(out)
    assert record["status"] == "ok", record["error"]
    assert record["timed_images"] == 4 * 2 * record["steps_timed"]
    assert {n["node"] for n in record["slurm"]["nodes"]} == {"n1", "n2"}
    assert len(record["peak_memory_bytes_per_rank"]) == 2


@pytest.mark.slow
def test_a_data_folder_the_nodes_cannot_read_fails_the_cell_before_training(cluster, tmp_path):
    sweep = write_sweep(tmp_path / "sweep.yaml", nodes=[2], data=str(tmp_path / "missing"))
    out = tmp_path / "out"
    scaling_ok(cluster, "sweep", sweep, "--out", out, "--backend", "slurm", "--wait", exit_code=1)
    [record] = read_records(out)
    assert record["status"] == "error"
    assert f"RuntimeError: data folder {tmp_path}/missing is not readable on n" in \
        record["error"]
    assert "\n" not in record["error"] and record.get("timed_images") is None


@pytest.mark.slow
def test_a_cell_past_its_time_limit_ends_as_timeout(cluster, tmp_path):
    """Slurm's smallest time limit is a minute: the cell hangs past it."""
    sweep = write_sweep(tmp_path / "sweep.yaml", timeout_s=3600)
    out = tmp_path / "out"
    scaling_ok(cluster, "sweep", sweep, "--out", out, "--backend", "slurm", "--time", "1",
               "--wait", env={**cluster.env, "SCALING_FAULT": "hang@0:1"}, exit_code=1)
    [record] = read_records(out)
    assert record["status"] == "timeout"
    assert "ended TIMEOUT" in record["error"]


@pytest.mark.slow
def test_a_task_requeued_while_it_runs_records_once_from_its_second_run(cluster, tmp_path):
    """The cell's window lasts 10 s: the requeue comes well within its first run. Slurm holds
    a requeued job for two minutes; the test lets it start again once the first run's
    processes are gone (started while they still ended, under load, the task once ended FAILED
    without a record). The window's steps are planned on the warm-up's pace: under the load of
    a full test run its 6 ms steps ran up to ten times slower, so the cell's timeout is left
    wide, as it is no part of what the test shows."""
    sweep = write_sweep(tmp_path / "sweep.yaml", min_time_s=10, timeout_s=900)
    out = tmp_path / "out"
    scaling_ok(cluster, "sweep", sweep, "--out", out, "--backend", "slurm")
    wait_until(lambda: list(out.glob("cells/*/launcher.log")), "cell started")
    [job] = read_ledger(out).values()
    task = f"{job['job_id']}_0"
    subprocess.run(["scontrol", "requeue", task], check=True, env=cluster.env)
    wait_until(lambda: task_states(cluster, out) == ["PENDING"], "requeued task pending")
    wait_until(lambda: not processes_mentioning(out), "the first run's processes gone")
    # A credential revoked by the requeue also revokes any issued within the same second, so
    # the second run begins a few seconds on: started at once, slurmd refuses it.
    subprocess.run(["scontrol", "update", f"JobId={task}", "StartTime=now+3"], check=True,
                   env=cluster.env)
    scaling_ok(cluster, "status", out, "--wait")
    [record] = read_records(out)
    check_measured(record, 4, min_time=True)
    assert record["slurm"]["restart_count"] == 1


@pytest.mark.slow
def test_a_killed_submitter_loses_and_repeats_nothing(cluster, tmp_path):
    """Killed as it submits its second array: before, while or after sbatch runs."""
    sweep = write_sweep(tmp_path / "sweep.yaml", nodes=[1, 2])
    out = tmp_path / "out"
    submitter = subprocess.Popen(
        [sys.executable, "-m", "scaling", "sweep", str(sweep), "--out", str(out), "--backend",
         "slurm", "--wait"], env=cluster.env, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    wait_until(lambda: len(list(out.glob("slurm/*.sbatch"))) == 2, "second batch script",
               timeout=120)
    os.kill(submitter.pid, signal.SIGKILL)
    submitter.wait()
    scaling_ok(cluster, "sweep", sweep, "--out", out, "--backend", "slurm", "--resume",
               "--wait")
    cells = by_cell(read_records(out))
    assert len(cells) == 2 and all(len(records) == 1 for records in cells.values())
    for [record] in cells.values():
        check_measured(record, 4 * record["nodes"])


@pytest.mark.slow
def test_allreduce_across_two_nodes(cluster, tmp_path):
    out = tmp_path / "out"
    scaling_ok(cluster, "allreduce", "--backend", "slurm", "--nodes", 2, "--devices", 1,
               "--device-type", "cpu", "--sizes", "4KiB,1MiB", "--out", out, cwd=tmp_path)
    [record] = read_records(out)
    assert record["status"] == "ok", record["error"]
    assert record["hosts"] and {n["node"] for n in record["slurm"]["nodes"]} == {"n1", "n2"}
    assert record["allreduce_devices"] == 2
    assert [size["bytes"] for size in record["allreduce"]] == [4096, 2**20]
    assert all(size["busbw_GBps"] == size["algbw_GBps"] > 0 for size in record["allreduce"])
    assert len((out / "allreduce.jsonl").read_text().splitlines()) == 2


def test_a_task_is_recorded_vanished_only_after_two_polls_a_grace_apart(own_cluster, tmp_path):
    """A held cell whose controller restarts with its state wiped: the first poll, even with
    no grace, and a second within the grace only see it missing; a later one records it."""
    out = tmp_path / "out"
    scaling_here(own_cluster, "sweep", write_sweep(tmp_path / "sweep.yaml"), "--out", out,
                 "--backend", "slurm", "--sbatch-arg=--hold")
    assert "1 pending" in scaling_here(own_cluster, "status", out).stdout
    own_cluster.stop_controller()
    own_cluster.start_controller(clear_state=True)
    for grace in ("0", "3600"):
        polled = scaling_here(own_cluster, "status", out, **{VANISH_GRACE_ENV: grace})
        assert "1 missing" in polled.stdout
        assert not (out / "results.jsonl").exists()
    polled = scaling_here(own_cluster, "status", out, **{VANISH_GRACE_ENV: "0"})
    assert "1 crashed" in polled.stdout
    [record] = read_records(out)
    assert record["status"] == "crashed"
    assert record["error"].endswith("vanished from the controller without a record")


def test_sbatch_refusing_is_a_one_line_infrastructure_error(cluster, tmp_path):
    result = scaling_here(cluster, "sweep", write_sweep(tmp_path / "sweep.yaml"), "--out",
                          tmp_path / "out", "--backend", "slurm", "--time", "nonsense",
                          exit_code=3)
    [line] = result.stderr.splitlines()
    assert line.startswith("Error: could not submit scaling-test-")
    assert line.endswith("sbatch exited 255: sbatch: error: Invalid --time specification")


def test_a_partition_without_nodes_is_a_one_line_infrastructure_error(cluster, tmp_path):
    result = scaling_here(cluster, "sweep", write_sweep(tmp_path / "sweep.yaml"), "--out",
                          tmp_path / "out", "--backend", "slurm", "--partition", "nowhere",
                          exit_code=3)
    assert result.stderr.splitlines() == ["Error: Slurm lists no nodes in partition 'nowhere'"]


@pytest.mark.slow
def test_default_threads_come_from_the_compute_nodes_not_the_submitting_host(tmp_path):
    """Nodes of one CPU, on a host of more: a cell that names no threads gets one. The curve's
    one-node cell and its baseline, run before and after it, all run on one of the two nodes,
    in that order."""
    assert os.cpu_count() > 1
    with start_cluster(tmp_path / "cluster", cpus_per_node=1) as small:
        out = tmp_path / "out"
        scaling_ok(small, "sweep", write_sweep(tmp_path / "sweep.yaml", single_baseline=True),
                   "--out", out, "--backend", "slurm", "--wait")
    records = read_records(out)
    assert [(r["launcher"], r["repeat"]) for r in records] == [
        ("single", 0), ("torchrun", 0), ("single", 1)]
    assert {(r["threads_per_device"], r["threads_default"]) for r in records} == {(1, True)}
    assert len({r["slurm"]["node_list"] for r in records}) == 1
    assert {r["slurm"]["job_id"] for r in records} == {records[0]["slurm"]["job_id"]}


@pytest.mark.slow
def test_a_shared_cell_is_marked_and_flagged_for_another_job_on_its_node(cluster, tmp_path):
    """A foreign job that keeps one core of node n1 busy; the cell, submitted --shared, takes
    the other core of n1."""
    busy = cluster.run("sbatch", "--parsable", "--nodelist=n1", "--cpus-per-task=1",
                       f"--output={tmp_path / 'busy.out'}",
                       f"--wrap=exec {sys.executable} -c 'while True: pass'")
    assert busy.returncode == 0, busy.stderr
    job = busy.stdout.strip()
    try:
        wait_until(lambda: cluster.run("squeue", "-h", "-j", job, "-o", "%T").stdout.strip()
                   == "RUNNING", "the foreign job running")
        out = tmp_path / "out"
        scaling_ok(cluster, "sweep", write_sweep(tmp_path / "sweep.yaml", threads_per_device=1),
                   "--out", out, "--backend", "slurm", "--shared", "--sbatch-arg=--nodelist=n1",
                   "--wait")
    finally:
        cluster.run("scancel", job)
    [record] = read_records(out)
    assert record["status"] == "ok"
    assert not record["slurm"]["exclusive"] and record["slurm"]["other_jobs"] == [job]
    assert record["noisy"] and f"other Slurm jobs ran on its nodes: {job}" in record["noise"]


def test_slurm_backend_without_slurm_is_a_one_line_error(tmp_path):
    result = scaling_here(None, "sweep", write_sweep(tmp_path / "sweep.yaml"), "--out",
                          tmp_path / "out", "--backend", "slurm", exit_code=3,
                          PATH="/nonexistent")
    assert result.stderr.splitlines() == [
        "Error: --backend slurm needs Slurm's sbatch on PATH (Debian: apt-get install "
        "slurm-wlm); use --backend local to run here"]


def test_cells_on_several_nodes_need_a_scheduler(tmp_path):
    result = scaling_here(None, "sweep", write_sweep(tmp_path / "sweep.yaml", nodes=[1, 2]),
                          "--out", tmp_path / "out", exit_code=2)
    assert "cells on 2 nodes need a scheduler: use --backend slurm" in result.stderr


@pytest.mark.slow
def test_the_example_batch_script_runs_a_sweep_in_one_allocation(cluster, tmp_path):
    sweep = write_sweep(tmp_path / "sweep.yaml")
    out = tmp_path / "out"
    ran = subprocess.run(["sbatch", "--wait", f"--chdir={tmp_path}",
                          f"--output={tmp_path}/%j.out", str(EXAMPLE), str(sweep), str(out)],
                         capture_output=True, text=True,
                         env={**cluster.env, "SCALING_PYTHON": sys.executable})
    assert ran.returncode == 0, ran.stderr + "".join(
        path.read_text() for path in tmp_path.glob("*.out"))
    [record] = read_records(out)
    check_measured(record, 4)


@pytest.mark.slow
def test_a_max_batch_search_runs_as_one_job(cluster, tmp_path):
    out = tmp_path / "out"
    # The search stops at its maximum, which fits: one trial, then the answer's confirmations.
    result = scaling_ok(cluster, "maxbatch", "--workload", "cifar10", "--image-size", 16,
                        "--devices", 1, "--min", 4, "--max", 4, "--multiple-of", 4,
                        "--steps", 1, "--warmup", 0, "--confirm-steps", 2,
                        "--confirm-warmup", 1, "--memory-limit", "1.5GiB",
                        "--out", out, "--backend", "slurm", "--wait")
    assert "ended COMPLETED" in result.stdout
    trials = read_records(out)
    assert {r["purpose"] for r in trials} == {"maxbatch", "confirmation"}
    assert "max_batch" in (out / "maxbatch.csv").read_text().splitlines()[0]
    assert len(list((out / "slurm").glob("*.sbatch"))) == 1


@pytest.mark.slow
def test_a_max_batch_search_that_gives_up_under_slurm_exits_1(cluster, tmp_path):
    """Every trial fails other than by OOM: the job's search gives up on its first batch, and
    the submitter, reading the job's table, exits as a local search would."""
    out = tmp_path / "out"
    result = scaling_ok(cluster, "maxbatch", "--workload", "cifar10", "--image-size", 16,
                        "--devices", 1, "--min", 4, "--max", 8, "--multiple-of", 4, "--steps", 1,
                        "--warmup", 0, "--memory-limit", "1.5GiB", "--out", out, "--backend",
                        "slurm", "--wait", env={**cluster.env, "SCALING_FAULT": "error@0:0"},
                        exit_code=1)
    assert "ended FAILED" in result.stdout
    [row] = read_maxbatch_csv(out)
    assert (row["status"], row["failed_batch"], row["trials"]) == ("error", "4", "2")


def test_a_bad_max_batch_search_is_refused_before_anything_is_submitted(cluster, tmp_path):
    result = scaling_here(cluster, "maxbatch", "--workload", "cifar10", "--devices", 1,
                          "--out", tmp_path / "out", "--backend", "slurm", "--wait",
                          exit_code=2)
    assert "on CPU devices the search needs --memory-limit" in result.stderr
    assert not (tmp_path / "out" / "slurm").exists()
