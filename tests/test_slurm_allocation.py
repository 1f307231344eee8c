"""One allocation per sweep (``--one-allocation``) on a real two-node Slurm cluster on this
machine: one job for the whole sweep, a curve's cells on the same nodes, cancel then resume,
a controller outage while a cell runs, a requeue, and a preflight inside the allocation."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import read_records, scaling_in_process, write_sweep
from cpugroup import AHEAD_SHARES
from test_slurm import (SINGLE, by_cell, cluster, own_cluster,  # noqa: F401
                        requeue_and_restart, scaling_here, scaling_ok, task_states)
from waiting import wait_until

from scaling.execute.preflight import PREFLIGHT_FILE
from scaling.report.tables import with_scaling
from scaling.slurm.allocation import allocation_time
from scaling.slurm.queue import VANISH_GRACE_ENV
from scaling.slurm.submit import read_ledger, steps_started

ONE = ("--backend", "slurm", "--one-allocation")
SLOW_SHARE = 0.4
"""The slowed node's quota, two fifths of a core. The other node runs ahead of the machine's
other work meanwhile (ten times its weight, tests/cpugroup.py), so that whatever else loads the
machine it has well over twice that; the preflight flags a figure more than 10% below the two
nodes' median, one under 0.82 of the other node's."""


def jobs_named(cluster, name: str) -> list:
    """The jobs the controller knows under job name ``name``."""
    shown = cluster.run("scontrol", "show", "job", "-o").stdout.splitlines()
    return [line for line in shown if f" JobName={name} " in line]


def only_allocation(out: Path) -> dict:
    [job] = read_ledger(out).values()
    assert job["allocation"] == "one" and job["job_id"]
    return job


@pytest.mark.slow
def test_a_sweep_over_one_and_two_nodes_runs_in_one_job_a_curve_on_the_same_nodes(cluster,
                                                                                  tmp_path):
    sweep = write_sweep(tmp_path / "sweep.yaml", nodes=[1, 2], single_baseline=True,
                        references="none")
    out = tmp_path / "out"
    swept = scaling_ok(cluster, "sweep", sweep, "--out", out, *ONE, "--wait")
    assert "4 submitted in one allocation of 2 node(s)" in swept.stdout
    job = only_allocation(out)
    [name] = read_ledger(out)
    assert len(jobs_named(cluster, name)) == 1
    # --wait returns once every cell is recorded; the job ends just after its last step.
    wait_until(lambda: "JobState=COMPLETED" in jobs_named(cluster, name)[0],
               "the allocation completed", timeout=60)
    cells = by_cell(read_records(out))
    assert len(cells) == 4 and all(len(records) == 1 for records in cells.values())
    records = [records[0] for records in cells.values()]
    assert sorted((r["launcher"], r["nodes"], r["status"]) for r in records) == [
        ("single", 1, "ok"), ("single", 1, "ok"), ("torchrun", 1, "ok"), ("torchrun", 2, "ok")]
    [wide] = [r for r in records if r["nodes"] == 2]
    first = wide["slurm"]["nodes"][0]["node"]
    assert [n["node"] for n in wide["slurm"]["nodes"]] == ["n1", "n2"]
    for record in records:
        slurm = record["slurm"]
        assert slurm["job_id"] == job["job_id"] and slurm["allocation"] == "one"
        assert slurm["job_node_list"] == "n[1-2]"
        assert record["hosts"][0] == wide["hosts"][0]
        if record["nodes"] == 1:
            assert slurm["node_list"] == first
            assert [n["node"] for n in slurm["nodes"]] == [first]
    assert steps_started(out, name) == [r["cell"] for r in records]
    assert "4 cells: 4 ok" in scaling_here(cluster, "status", out).stdout
    # Every point names the hosts its baseline ran on: the 1-node cells' own host.
    one_node_hosts = sorted({host for r in records if r["nodes"] == 1 for host in r["hosts"]})
    assert len(one_node_hosts) == 1
    for row in with_scaling(records):
        assert row["baseline_hosts"] == one_node_hosts, row["cell"]


@pytest.mark.slow
def test_a_cancelled_allocation_keeps_its_records_and_resume_runs_the_rest(cluster, tmp_path):
    """Cancelled, from this process, as soon as its first cell is recorded: the cells after it,
    each an interpreter and a framework to start, are far from recorded then, so the resume
    has some to run. One thread per device: two on this 2-core machine, beside another test's
    busy process, can collapse until the cell times out, and this test is about the records,
    not the pace."""
    sweep = write_sweep(tmp_path / "sweep.yaml", frameworks=SINGLE, batch_sizes=[2, 3, 4],
                        threads_per_device=1, references="none")
    out = tmp_path / "out"
    scaling_here(cluster, "sweep", sweep, "--out", out, *ONE)
    wait_until(lambda: (out / "results.jsonl").exists(), "first record")
    cancelled = scaling_here(cluster, "cancel", out)
    done = read_records(out)
    assert done and all(record["status"] == "ok" for record in done)
    assert f"{3 - len(done)} not_run" in cancelled.stdout
    assert task_states(cluster, out) == []
    resumed = scaling_ok(cluster, "sweep", sweep, "--out", out, *ONE, "--resume", "--wait")
    assert f"{3 - len(done)} submitted in one allocation" in resumed.stdout
    assert len(read_ledger(out)) == 2
    cells = by_cell(read_records(out))
    assert len(cells) == 3 and all(len(records) == 1 for records in cells.values())
    assert {records[0]["status"] for records in cells.values()} == {"ok"}
    assert "3 cells: 3 ok" in scaling_here(cluster, "status", out).stdout


@pytest.mark.slow
def test_a_controller_outage_in_an_allocation_invents_nothing(own_cluster, tmp_path):
    """slurmctld stops while the allocation's first cell runs and stays down until that cell
    has measured: ``status`` exits 3 and records nothing, ``status --wait`` rides the outage
    out, and every cell ends with its own record. A zero vanish grace makes any poll that missed
    the allocation after the restart record it, so the test would see it. The outage lasts
    as long as the conditions above take, whatever the cell's window: a cell records only once
    it has asked the controller for the other jobs on its nodes, so none can record while it is
    down; its 3 s window, after its interpreter and framework start, only keeps it from
    recording before the controller stops."""
    cluster = own_cluster
    env = {**cluster.env, VANISH_GRACE_ENV: "0"}
    sweep = write_sweep(tmp_path / "sweep.yaml", frameworks=SINGLE, batch_sizes=[2, 4],
                        min_time_s=3, threads_per_device=1, references="none")
    out = tmp_path / "out"
    scaling_here(cluster, "sweep", sweep, "--out", out, *ONE, **{VANISH_GRACE_ENV: "0"})
    [name] = read_ledger(out)
    wait_until(lambda: steps_started(out, name)
               and (out / "cells" / steps_started(out, name)[0] / "launcher.log").exists(),
               "the first cell started")
    first = out / "cells" / steps_started(out, name)[0]
    cluster.stop_controller()
    try:
        down = scaling_here(cluster, "status", out, exit_code=3, **{VANISH_GRACE_ENV: "0"})
        assert down.stderr.startswith("Error: could not ask the Slurm controller")
        assert not (out / "results.jsonl").exists()
        log = tmp_path / "wait.log"
        with log.open("w") as output:
            waiting = subprocess.Popen(
                [sys.executable, "-m", "scaling", "status", str(out), "--wait"], env=env,
                stdout=output, stderr=subprocess.STDOUT)
        wait_until(lambda: "asking again" in log.read_text(), "a failed poll asked again")
        wait_until(lambda: list(first.glob("rank*.json")), "the first cell measured")
    finally:
        cluster.start_controller()
    assert waiting.wait(timeout=600) == 0, log.read_text()
    assert "2 cells: 2 ok" in log.read_text()
    cells = by_cell(read_records(out))
    assert len(cells) == 2 and all(len(records) == 1 for records in cells.values())
    for [record] in cells.values():
        assert record["status"] == "ok" and record["slurm"]["allocation"] == "one"
    assert [json.loads(line)["cell"] for line in
            (out / "slurm" / f"{name}.steps.jsonl").read_text().splitlines()] == list(cells)


def test_an_unknown_allocation_is_a_one_line_error_naming_the_valid_ones(tmp_path):
    sweep = write_sweep(tmp_path / "sweep.yaml", slurm={"allocation": "many"})
    result = scaling_in_process("sweep", sweep, "--out", tmp_path / "out", "--backend", "slurm")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"Error: {sweep}: slurm.allocation must be one of array, one, got 'many'"]


def test_one_allocation_without_slurm_is_a_one_line_error(tmp_path):
    result = scaling_in_process("sweep", write_sweep(tmp_path / "sweep.yaml"), "--out",
                                tmp_path / "out", "--one-allocation")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "Error: --one-allocation runs the sweep inside one Slurm job: add --backend slurm"]
    assert not (tmp_path / "out").exists()


def test_the_allocation_asks_for_each_cells_time():
    assert allocation_time("0:30:00", 4) == "0-02:00:00"
    assert allocation_time("90", 2) == "0-03:00:00"
    assert allocation_time("1-12", 3) == "4-12:00:00"
    assert allocation_time("INFINITE", 3) == "INFINITE"


@pytest.mark.slow
def test_a_requeued_allocation_goes_on_and_records_each_cell_once(cluster, tmp_path):
    """Requeued as soon as its first cell has started (a 3 s window after its interpreter and
    framework start): the allocation starts again once the first run's processes are gone
    (``requeue_and_restart``), runs that cell again and the next, and records each once. The cells'
    timeout is left wide: under a full test run's load their windows' steps, planned on the
    warm-up's pace, ran many times slower, and the timeout is no part of what the test
    shows."""
    sweep = write_sweep(tmp_path / "sweep.yaml", frameworks=SINGLE, batch_sizes=[2, 4],
                        min_time_s=3, timeout_s=900, references="none")
    out = tmp_path / "out"
    scaling_here(cluster, "sweep", sweep, "--out", out, *ONE)
    wait_until(lambda: list(out.glob("cells/*/launcher.log")), "first cell started")
    job = only_allocation(out)
    task = f"{job['job_id']}_0"
    requeue_and_restart(cluster, out, task)
    scaling_ok(cluster, "status", out, "--wait")
    cells = by_cell(read_records(out))
    assert len(cells) == 2 and all(len(records) == 1 for records in cells.values())
    for [record] in cells.values():
        assert record["status"] == "ok" and record["slurm"]["restart_count"] == 1
    [name] = read_ledger(out)
    started = steps_started(out, name)
    assert started[0] == started[1] and started[1:] == list(cells)


@pytest.mark.slow
def test_a_preflight_inside_the_allocation_keeps_the_cells_off_a_slowed_node(cluster,
                                                                             tmp_path):
    """n2 slowed (``SLOW_SHARE``), n1 ahead: the preflight, the allocation's first step, flags
    n2; the one-node cells run on n1 and the two-node cell, with no second good node, is left
    unrun for --resume."""
    sweep = write_sweep(tmp_path / "sweep.yaml", nodes=[1, 2], steps=2, warmup=1)
    out = tmp_path / "out"
    with cluster.grouped("n1", "ahead", shares=AHEAD_SHARES), cluster.slowed("n2", SLOW_SHARE):
        scaling_ok(cluster, "sweep", sweep, "--out", out, *ONE, "--preflight", "--wait",
                   exit_code=1)
    assert json.loads((out / PREFLIGHT_FILE).read_text())["flagged"] == ["n2"]
    [record] = read_records(out)
    assert (record["nodes"], record["status"]) == (1, "ok")
    assert record["slurm"]["node_list"] == "n1"
    assert "1 not_run" in scaling_here(cluster, "status", out).stdout
