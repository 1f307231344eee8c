"""Sweeps under a real Slurm cluster of two nodes on this machine: job arrays, cells that span
nodes, states mapped to statuses, requeue, a killed submitter, hostile names that stay inert, a
task that vanishes, and strict reading of what Slurm answers. Cancel and resume, and a
controller that goes down, are the backends' contract (tests/test_backend_contract.py).

The tests run in this file's order: those that need both nodes first, then those of one node,
which run on n1 while a cell hangs on n2 past Slurm's smallest time limit (``one_node_jobs``),
so that its minute passes beside them; the test that reads that cell comes last."""

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
from slurmcluster import SlurmCluster, missing_binaries, wait_until

from scaling.cli import cli
from scaling.schema import RECORD_FIELDS
from scaling.slurm.queue import ACTIVE, VANISH_GRACE_ENV
from scaling.maxbatch.search import read_maxbatch_csv
from scaling.slurm.submit import read_ledger

EXAMPLE = Path(__file__).resolve().parents[1] / "slurm" / "sweep.sbatch"
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


def ended_job(cluster, job: str):
    """``scontrol``'s line for ``job`` once it has ended, else None."""
    shown = cluster.run("scontrol", "show", "job", "-o", job).stdout
    state = re.search(r"\bJobState=(\S+)", shown)
    return shown if state and state.group(1) not in ACTIVE else None


def start_requeued(cluster, task: str, requeued: float) -> None:
    """Start array task ``task``, requeued at ``requeued`` (``time.time()`` once ``scontrol
    requeue`` returned), which Slurm holds for two minutes; call it once the first run's
    processes are gone (started while they still ended, under load, the task once ended FAILED
    without a record). A credential revoked by the requeue also revokes any issued within the
    same second, so the second run begins 3 s after the requeue at the earliest: started at
    once, slurmd refuses it. A start time of now has the controller schedule the task within
    its batch delay, seconds; a start time still ahead waited for a later pass, up to half a
    minute on."""
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
    as ``start_requeued`` says. The window's steps are planned on the warm-up's pace: under the
    load of a full test run its 6 ms steps ran up to ten times slower, so the cell's timeout is
    left wide, as it is no part of what the test shows."""
    sweep = write_sweep(tmp_path / "sweep.yaml", frameworks=SINGLE, min_time_s=3,
                        timeout_s=900, references="none")
    out = tmp_path / "out"
    scaling_here(cluster, "sweep", sweep, "--out", out, "--backend", "slurm")
    wait_until(lambda: list(out.glob("cells/*/launcher.log")), "cell started")
    [job] = read_ledger(out).values()
    task = f"{job['job_id']}_0"
    subprocess.run(["scontrol", "requeue", task], check=True, env=cluster.env)
    requeued = time.time()
    wait_until(lambda: task_states(cluster, out) == ["PENDING"], "requeued task pending")
    wait_until(lambda: not processes_mentioning(out), "the first run's processes gone")
    start_requeued(cluster, task, requeued)
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
