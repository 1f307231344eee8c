"""Sweeps under a real Slurm cluster of two nodes on this machine: job arrays, cells that span
nodes, states mapped to statuses, requeue, a killed submitter, hostile names that stay inert, a
task that vanishes, and strict reading of what Slurm answers. Cancel and resume, and a
controller that goes down, are the backends' contract (tests/test_backend_contract.py); jobs of
one node (a batch script, searches, requeue, time limits) are tests/test_slurm_jobs.py."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import (check_images_per_sec, cell_logs, processes_mentioning, read_records,
                      write_sweep)
from slurmcluster import SlurmCluster, missing_binaries
from waiting import wait_until

from scaling.cli import cli
from scaling.schema import RECORD_FIELDS
from scaling.slurm.environment import JobEnvironment
from scaling.slurm.queue import VANISH_GRACE_ENV

HOSTILE = "a'; touch PWNED; echo '"
SINGLE = {"torch": {"launchers": ["single"]}}
"""The frameworks of a sweep whose one cell's launcher is no part of what its test shows: one
process, no agent, no rendezvous."""
HAS_JAX = importlib.util.find_spec("jax") is not None


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


def requeue_and_restart(cluster, out: Path, task: str) -> None:
    """Requeue array task ``task`` of ``out``'s sweep while it runs, and start it again, which
    Slurm would hold for two minutes: once the task is pending and the first run's processes
    are gone (started while they still ended, under load, the task once ended FAILED without a
    record). A credential revoked by the requeue also revokes any issued within the same
    second, so the second run begins 3 s after the requeue at the earliest: started at once,
    slurmd refuses it. A start time of now has the controller schedule the task at once; a
    start time still ahead waited for a later pass, up to half a minute on."""
    subprocess.run(["scontrol", "requeue", task], check=True, env=cluster.env)
    requeued = time.time()
    wait_until(lambda: task_states(cluster, out) == ["PENDING"], "requeued task pending")
    wait_until(lambda: not processes_mentioning(out), "the first run's processes gone")
    wait_until(lambda: time.time() >= requeued + 3, "3 s past the requeue")
    subprocess.run(["scontrol", "update", f"JobId={task}", "StartTime=now"], check=True,
                   env=cluster.env)


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
    two nodes, in a folder and under a sweep name that are shell code. Throughput alone
    (``references: none``): no test here reads the scaling model's fields."""
    root = tmp_path_factory.mktemp("hostile")
    sweep = write_sweep(root / "sweep.yaml", name=HOSTILE, nodes=[1, 2], references="none",
                        frameworks={"torch": {"launchers": ["torchrun"]},
                                    "tensorflow": {"launchers": ["tf-multiworker"]}})
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
    assert "4 cells: 4 ok" in scaling_here(cluster, "status", root / HOSTILE).stdout


@pytest.fixture(scope="module")
def two_node_launchers(cluster, tmp_path_factory):
    """One sweep over two nodes, run once for the tests that read it: horovod in every framework
    that has it, and jax-distributed where JAX is installed (one job array, a task each);
    throughput alone. Each test asserts on its own cells, so one launcher's failure fails its
    own test only."""
    root = tmp_path_factory.mktemp("launchers")
    frameworks = {framework: {"launchers": ["horovod"]}
                  for framework in ("torch", "tensorflow", "mxnet")}
    if HAS_JAX:
        frameworks["jax"] = {"launchers": ["jax-distributed"]}
    sweep = write_sweep(root / "sweep.yaml", nodes=[2], references="none", frameworks=frameworks)
    out = root / "out"
    swept = scaling(cluster, "sweep", sweep, "--out", out, "--backend", "slurm", "--wait")
    return out, swept.stdout + swept.stderr + cell_logs([out])


@pytest.mark.slow
def test_horovod_cells_over_two_nodes_for_every_framework(two_node_launchers):
    out, said = two_node_launchers
    records = [r for r in read_records(out) if r["launcher"] == "horovod"]
    assert sorted((r["framework"], r["status"]) for r in records) == [
        ("mxnet", "ok"), ("tensorflow", "ok"), ("torch", "ok")], \
        [r["error"] for r in records] + [said]
    for record in records:
        assert record["timed_images"] == 4 * 2 * record["steps_timed"]
        assert {n["node"] for n in record["slurm"]["nodes"]} == {"n1", "n2"}


@pytest.mark.slow
@pytest.mark.skipif(not HAS_JAX, reason="JAX is not installed (pip install -e '.[jax]')")
def test_a_jax_distributed_cell_over_two_nodes(two_node_launchers):
    out, said = two_node_launchers
    [record] = [r for r in read_records(out) if r["framework"] == "jax"]
    assert record["launcher"] == "jax-distributed"
    assert record["status"] == "ok", (record["error"], said)
    assert record["timed_images"] == 4 * 2 * record["steps_timed"]
    assert {n["node"] for n in record["slurm"]["nodes"]} == {"n1", "n2"}
    assert len(record["peak_memory_bytes_per_rank"]) == 2


def test_both_nodes_of_a_step_derive_one_rendezvous_port_that_names_its_cluster(cluster):
    """Clusters whose nodes share hosts number their jobs alike: a cell's placement on each
    node of a step derives its port from the job, the task and the cluster's name."""
    place = ("from scaling.cell import make_cell; from scaling.slurm.task import slurm_placement; "
             "import os; print(os.environ['SLURM_JOB_ID'], slurm_placement(make_cell("
             "framework='torch', launcher='torchrun', workload='cifar10', devices=1, "
             "batch_size=2, device_type='cpu', nodes=2), 3).rendezvous_port)")
    step = cluster.run("srun", "--nodes=2", "--ntasks-per-node=1", sys.executable, "-c", place)
    assert step.returncode == 0, step.stderr
    first, second = step.stdout.splitlines()
    assert first == second
    job_id, port = first.split()
    [name] = re.findall(r"^ClusterName\s*=\s*(\S+)$",
                        cluster.run("scontrol", "show", "config").stdout, re.MULTILINE)
    named = JobEnvironment.read({"SLURM_JOB_ID": job_id, "SLURM_CLUSTER_NAME": name})
    unnamed = JobEnvironment.read({"SLURM_JOB_ID": job_id})
    assert int(port) == named.rendezvous_port("3") != unnamed.rendezvous_port("3")


def test_the_same_job_and_task_of_two_clusters_meet_on_two_ports():
    ports = {JobEnvironment.read({"SLURM_JOB_ID": "1", "SLURM_CLUSTER_NAME": name}
                                 ).rendezvous_port("0") for name in ("scaling1c0", "scaling2c0")}
    assert len(ports) == 2


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
def test_a_killed_submitter_loses_and_repeats_nothing(cluster, tmp_path):
    """Killed as it submits its second array: before, while or after sbatch runs. Two
    one-process cells of their own baselines, so two arrays, each pinned to a node."""
    sweep = write_sweep(tmp_path / "sweep.yaml", frameworks=SINGLE, batch_sizes=[2, 4],
                        references="none")
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
    records = sorted((records[0] for records in cells.values()), key=lambda r: r["batch_size"])
    for record, batch in zip(records, (2, 4)):
        check_measured(record, batch)


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


def test_a_bad_max_batch_search_is_refused_before_anything_is_submitted(cluster, tmp_path):
    result = scaling_here(cluster, "maxbatch", "--workload", "cifar10", "--devices", 1,
                          "--out", tmp_path / "out", "--backend", "slurm", "--wait",
                          exit_code=2)
    assert "on CPU devices the search needs --memory-limit" in result.stderr
    assert not (tmp_path / "out" / "slurm").exists()
