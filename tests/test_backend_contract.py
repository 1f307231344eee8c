"""The contract every backend keeps, run against each one present (``scaling.backends``): a
cell recorded; a failed cell recorded with why; a sweep cancelled part way, then resumed; and an
outage part way that loses and invents nothing. Each backend's harness says how its user
cancels and what its outage is:

- ``local``: cancelling is Ctrl-C to the sweep; the outage is the sweep killed outright (the
  submitting machine lost). A cell cut short is recorded by neither.
- ``slurm`` (a private two-node cluster): cancelling is ``scaling cancel``, which records the
  cells it stopped as ``cancelled``; the outage is the controller stopped while cells run:
  ``status`` exits 3 and records nothing until it is back.
- ``ray`` (a real two-node Ray cluster): the command drives its cells, so cancelling is Ctrl-C,
  and the outage is the command killed outright: Ray ends the tasks of a driver that is gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter

import pytest
from conftest import cell_logs, processes_mentioning, read_records, wait_until, write_sweep
from raycluster import RayCluster, missing_ray
from slurmcluster import SlurmCluster, missing_binaries

from scaling.backends import BACKENDS
from scaling.backends.ray import scratch_name
from scaling.slurm.queue import VANISH_GRACE_ENV
from scaling.sweep import expand, load_sweep


class Local:
    """This machine: the sweep runs in the command, and nothing outlives it."""

    name = "local"
    env = os.environ
    window_s = 3
    """Seconds each of the two cells' windows lasts in a cut. The cut comes within a poll
    (0.2 s) of its moment (a cell's process up; for the outage, the second cell's once the first
    is recorded), when that cell still has its warm-up and window ahead: 3 s is many polls."""

    def __init__(self, root):
        self.root = root

    def command(self, *args, env=None, wait=True):
        argv = [sys.executable, "-m", "scaling", *map(str, args)]
        if wait:
            return subprocess.run(argv, capture_output=True, text=True, env=env or self.env,
                                  timeout=900)
        return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env=env or self.env)

    def sweep(self, config, out, *args, env=None, wait=True):
        return self.command("sweep", config, "--out", out, "--backend", self.name, *args,
                            env=env, wait=wait)

    def cancel(self, out, started) -> None:
        started.send_signal(signal.SIGINT)
        started.wait(timeout=120)

    def processes(self, out) -> list:
        """The live processes of ``out``'s cells (each rank names its cell folder)."""
        return processes_mentioning(out)

    def running(self, out) -> bool:
        return bool(self.processes(out))

    def outage_due(self, out) -> bool:
        """A cell runs while an earlier one is recorded: work done, under way and not begun."""
        return (out / "results.jsonl").exists() and self.running(out)

    def outage(self, out, started) -> None:
        started.kill()
        started.wait()

    def close(self) -> None:
        """Nothing runs once the command ended."""


class Slurm(Local):
    """A private Slurm cluster of two nodes: cells run as jobs that outlive the command."""

    name = "slurm"
    window_s = 8
    """Both cells must still run after the outage's moment while the controller stops and a
    status call starts and asks, several seconds of process starts on a loaded machine."""

    def __init__(self, root):
        super().__init__(root)
        if missing_binaries():
            pytest.skip(f"Slurm is not installed ({', '.join(missing_binaries())} missing)")
        self.cluster = SlurmCluster(root, nodes=2, cpus_per_node=2).__enter__()
        self.env = self.cluster.env

    def sweep(self, config, out, *args, env=None, wait=True):
        """Submitted, and waited for (the harness's own ``--wait``) where ``wait``."""
        result = super().sweep(config, out, *args, *(["--wait"] if wait else []), env=env)
        if not wait:
            assert result.returncode == 0, result.stdout + result.stderr
        return result

    def cancel(self, out, started) -> None:
        cancelled = self.command("cancel", out)
        assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr

    def outage_due(self, out) -> bool:
        """Both cells run, one on each node."""
        return len([folder for folder in (out / "cells").glob("*")
                    if processes_mentioning(folder)]) == 2

    def outage(self, out, started) -> None:
        """The controller stops while cells run: asking exits 3 and records nothing; waiting,
        begun during the outage, asks again until the controller is back (with its state) and
        ends with each cell's own record. A zero vanish grace makes any poll that missed the
        tasks after the restart record them, so the test would see it."""
        env = {**self.env, VANISH_GRACE_ENV: "0"}
        before = read_records(out) if (out / "results.jsonl").exists() else []
        self.cluster.stop_controller()
        try:
            down = self.command("status", out, env=env)
            assert down.returncode == 3, down.stdout + down.stderr
            assert down.stderr.splitlines() == [down.stderr.strip()]
            assert down.stderr.startswith("Error: could not ask the Slurm controller: squeue "
                                          "exited")
            assert not (out / "slurm" / "missing.json").exists()
            after = read_records(out) if (out / "results.jsonl").exists() else []
            assert [r["status"] for r in after] == [r["status"] for r in before]
            log = out.parent / "wait.log"
            with log.open("w") as output:
                waiting = subprocess.Popen(
                    [sys.executable, "-m", "scaling", "status", str(out), "--wait"], env=env,
                    stdout=output, stderr=subprocess.STDOUT)
            wait_until(lambda: "asking again" in log.read_text(), "a failed poll asked again")
        finally:
            self.cluster.start_controller()
        assert waiting.wait(timeout=600) == 0, log.read_text()
        assert "2 cells: 2 ok" in log.read_text()

    def close(self) -> None:
        self.cluster.__exit__(None, None, None)


class Ray(Local):
    """A Ray cluster of two nodes: the command drives the cells, whose ranks run in its nodes'
    own scratch folders."""

    name = "ray"

    def __init__(self, root):
        super().__init__(root)
        if missing_ray():
            pytest.skip(missing_ray())
        self.cluster = RayCluster(nodes=2, cpus_per_node=2).__enter__()
        self.env = self.cluster.env

    def processes(self, out) -> list:
        """The ranks name the cell's folder in their node's scratch, named after ``out``."""
        return processes_mentioning(scratch_name(out))

    def close(self) -> None:
        self.cluster.__exit__(None, None, None)


HARNESSES = {"local": Local, "ray": Ray, "slurm": Slurm}


def test_every_registered_backend_has_a_harness_here():
    assert sorted(HARNESSES) == BACKENDS.names()


@pytest.fixture(scope="module", params=sorted(HARNESSES))
def backend(request, tmp_path_factory):
    harness = HARNESSES[request.param](tmp_path_factory.mktemp(request.param))
    yield harness
    harness.close()


def one_thread_sweep(path, **overrides):
    """A tiny sweep whose device is one thread: what the contract shows is records, not pace,
    and a cell of two threads on a two-core machine beside other work runs many times slower
    (its threads spin waiting for a preempted peer), past its timeout."""
    return write_sweep(path, threads_per_device=1, **overrides)


def two_cells(path, backend):
    """Two cells whose windows last the harness's ``window_s`` each, so that a cancel or an
    outage comes while they run."""
    return one_thread_sweep(path, batch_sizes=[2, 4], min_time_s=backend.window_s)


def cells_of(config) -> set:
    return {cell.cell_id for cell in expand(load_sweep(config))}


@pytest.mark.slow
def test_a_cell_is_recorded_and_a_failed_cell_says_why(backend, tmp_path):
    """One sweep of two ``single`` cells (the launcher is not what the contract checks), the
    fault injected into the second alone (batch 4): the first is recorded ok, the second
    recorded with why, and the sweep exits 1 for it."""
    config = one_thread_sweep(tmp_path / "sweep.yaml", batch_sizes=[2, 4],
                              frameworks={"torch": {"launchers": ["single"]}})
    swept = backend.sweep(config, tmp_path / "out",
                          env={**backend.env, "SCALING_FAULT": "error@0:1:4"})
    assert swept.returncode == 1, swept.stdout + swept.stderr + cell_logs([tmp_path / "out"])
    records = read_records(tmp_path / "out")
    assert sorted(record["batch_size"] for record in records) == [2, 4]
    ok, failed = sorted(records, key=lambda record: record["batch_size"])
    assert ok["status"] == "ok" and ok["images_per_sec"] > 0, cell_logs([tmp_path / "out"])
    assert failed["status"] == "error"
    assert failed["error"] == "rank 0: RuntimeError: injected fault at rank 0, step 1"


def cut_short(backend, tmp_path, moment, what: str, cut):
    """Two cells started, ``cut(out, started)`` once ``moment(out)`` holds, and waited for
    until none of their processes is left; the sweep file and the folder."""
    config, out = two_cells(tmp_path / "sweep.yaml", backend), tmp_path / "out"
    started = backend.sweep(config, out, wait=False)
    wait_until(lambda: moment(out), what)
    cut(out, started)
    wait_until(lambda: not backend.processes(out), "no cell's processes left")
    return config, out


@pytest.mark.slow
def test_a_sweep_cancelled_part_way_then_resumed_has_each_cell_once(backend, tmp_path):
    config, out = cut_short(backend, tmp_path, backend.running, "a cell running",
                            backend.cancel)
    cancelled = Counter(record["cell"] for record in read_records(out)) \
        if (out / "results.jsonl").exists() else Counter()
    assert set(cancelled.values()) <= {1}
    resumed = backend.sweep(config, out, "--resume")
    assert resumed.returncode in (0, 1), resumed.stdout + resumed.stderr + cell_logs([out])
    records = read_records(out)
    assert Counter(record["cell"] for record in records) == Counter(cells_of(config))
    assert {record["status"] for record in records} <= {"ok", "cancelled"}
    assert resumed.returncode == int(any(r["status"] != "ok" for r in records))


@pytest.mark.slow
def test_an_outage_part_way_loses_and_invents_nothing(backend, tmp_path):
    config, out = cut_short(backend, tmp_path, backend.outage_due, "the outage's moment",
                            backend.outage)
    refused = backend.sweep(config, out)
    assert refused.returncode == 2 and "pass --resume" in refused.stderr, refused.stderr
    resumed = backend.sweep(config, out, "--resume")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr + cell_logs([out])
    records = read_records(out)
    assert Counter(record["cell"] for record in records) == Counter(cells_of(config))
    assert all(record["status"] == "ok" for record in records)
