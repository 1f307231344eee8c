"""A history of real runs (``--history FILE``, ``scaling history``): a node slowed by a CPU
quota is a change once a second run confirms it, a run beside a busy neighbour is a one-off
and no change, and two nodes keep trends of their own.

Every run's one-thread cell runs in a CPU group of its own, ahead of the machine's other work
(ten times its weight), so that whatever else the machine runs moves its images/sec little;
the group's quota of one core holds it and anything beside it in the group. The node is slowed
by lowering the quota to 0.3 of a core (about -70%); the busy neighbours are two processes
spinning in the same group (about -67%). Either holds from the moment the cell's process
starts, before its imports, until its rank has reported, after its window: all that its
figures are taken from; the sweep's own start and bookkeeping run at the full core either
way. Changes are reported from 40%, beyond what two runs of the same tiny cell differ by here
(25% and more while the machine's other work comes and goes)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import pytest
from conftest import processes_mentioning, scaling_cli, wait_until, write_sweep
from cpugroup import AHEAD_SHARES, cpu_group, join

PERIOD_US = 10000
SLOWED_SHARE = 0.3
NEIGHBOURS = 2
MIN_CHANGE = "0.4"


@pytest.fixture
def group(tmp_path):
    with cpu_group(f"scaling-history-{os.getpid()}-{tmp_path.name}", shares=AHEAD_SHARES,
                   cfs_period_us=PERIOD_US, cfs_quota_us=PERIOD_US) as made:
        yield made


@contextlib.contextmanager
def slowed(group):
    """The group's quota lowered to ``SLOWED_SHARE`` of a core while inside."""
    (group / "cpu.cfs_quota_us").write_text(str(int(PERIOD_US * SLOWED_SHARE)))
    try:
        yield
    finally:
        (group / "cpu.cfs_quota_us").write_text(str(PERIOD_US))


@contextlib.contextmanager
def busy_neighbour(group):
    """:data:`NEIGHBOURS` processes spinning in the group while inside."""
    neighbours = [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                   preexec_fn=lambda: join(group)) for _ in range(NEIGHBOURS)]
    try:
        yield
    finally:
        for neighbour in neighbours:
            neighbour.kill()
            neighbour.wait()


def cell_started(out) -> bool:
    """The cell's process is up (it names its folder, or its shared tree's)."""
    return bool(processes_mentioning(out / "trees") or processes_mentioning(out / "cells"))


def run_into(history, tmp_path, name, group, node="node-a", measured_in=contextlib.nullcontext,
             min_time_s=2):
    """One real run of a tiny ``single`` cell (a history keeps launchers apart as any other
    field of a curve), added to ``history`` by the sweep itself; ``measured_in()`` holds from
    the cell's process start to its rank's report (module docstring)."""
    out = tmp_path / name
    config = write_sweep(tmp_path / f"{name}.yaml", name=name, threads_per_device=1,
                         frameworks={"torch": {"launchers": ["single"]}},
                         **({"min_time_s": min_time_s} if min_time_s else {}))
    stdout, stderr = tmp_path / f"{name}.stdout", tmp_path / f"{name}.stderr"
    with stdout.open("w") as out_file, stderr.open("w") as err_file:
        started = subprocess.Popen(
            [sys.executable, "-m", "scaling", "sweep", str(config), "--out", str(out),
             "--history", str(history)], stdout=out_file, stderr=err_file,
            env={**os.environ, "SCALING_NODE_NAME": node}, preexec_fn=lambda: join(group))

    def ended() -> bool:
        return started.poll() is not None

    try:
        wait_until(lambda: ended() or cell_started(out), "the cell's process")
        with measured_in():
            wait_until(lambda: ended() or any(out.glob("cells/*/rank*.json")),
                       "the cell's rank report")
        started.wait(timeout=900)
    finally:
        if started.poll() is None:
            started.kill()
            started.wait()
    printed = stdout.read_text()
    assert started.returncode == 0, printed + stderr.read_text()
    assert f"points to the history {history}" in printed


def trend(history, tmp_path, *args):
    """The history's verdicts by node, and its summary line (``args``: more options)."""
    shown = scaling_cli("history", history, "--min-change", MIN_CHANGE, "--json",
                        tmp_path / "history.json", *args)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    series = json.loads((tmp_path / "history.json").read_text())
    return ({entry["node"]: [point["verdict"] for point in entry["points"]] for entry in series},
            shown.stdout, series)


@pytest.mark.slow
def test_a_slowed_node_is_a_change_once_confirmed_and_a_busy_neighbour_is_not(tmp_path, group):
    history = tmp_path / "history.duckdb"
    run_into(history, tmp_path, "first", group)
    run_into(history, tmp_path, "busy", group, measured_in=lambda: busy_neighbour(group))
    run_into(history, tmp_path, "again", group)
    run_into(history, tmp_path, "slowed", group, measured_in=lambda: slowed(group))
    # The busy run is a one-off and no change, and the slowed run waits for the next: the
    # verdicts of the first three runs are the ones they had as the history's last three
    # (each is judged against the level before it and the run after it alone).
    verdicts, shown, _ = trend(history, tmp_path)
    assert verdicts == {"node-a": ["same", "not confirmed", "same", "unconfirmed"]}
    assert "no confirmed change, 1 unconfirmed" in shown.splitlines()[-1]

    run_into(history, tmp_path, "slowed-again", group, measured_in=lambda: slowed(group))
    # Its one point starts a series of its own, "same" whatever its pace: no long window.
    run_into(history, tmp_path, "other-node", group, node="node-b", min_time_s=None)
    verdicts, shown, series = trend(history, tmp_path)
    assert verdicts == {"node-a": ["same", "not confirmed", "same", "change", "same"],
                        "node-b": ["same"]}
    [changed] = [point for entry in series for point in entry["points"]
                 if point["verdict"] == "change"]
    assert changed["ratio"] < 0.6 and changed["run"] == str(tmp_path / "slowed")
    assert changed["since"] == str(tmp_path / "first")  # the level the later runs kept
    assert "1 confirmed change(s)" in shown and shown.rstrip().splitlines()[-1].startswith(
        "cifar10 16px, torch / single, batch 4 1 thread, 1 device(s) on node-a: -")

    again = scaling_cli("history", "add", history, tmp_path / "first")
    assert again.returncode == 0, again.stderr  # added again: its points replaced, not doubled
    page = tmp_path / "history.html"
    assert trend(history, tmp_path, "--html", page)[0] == verdicts
    assert page.read_text().count("<svg") == 1  # one curve, with both nodes' lines


def test_a_missing_history_and_a_run_without_records_are_one_line_errors(tmp_path):
    from conftest import scaling_in_process

    missing = scaling_in_process("history", tmp_path / "none.duckdb")
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        f"Error: no history file {tmp_path / 'none.duckdb'}: make one with scaling history add "
        f"{tmp_path / 'none.duckdb'} DIR, or a sweep's --history {tmp_path / 'none.duckdb'}"]
    empty = tmp_path / "empty"
    empty.mkdir()
    refused = scaling_in_process("history", "add", tmp_path / "h.duckdb", empty)
    assert refused.returncode == 2 and "holds no sweep records" in refused.stderr


def point(images_per_sec, run):
    return {"run": run, "status": "ok", "images_per_sec": images_per_sec,
            "low": images_per_sec * 0.98, "high": images_per_sec * 1.02}


def test_a_dip_that_half_recovers_is_one_change_the_size_of_where_it_settled():
    from scaling.report.history import judged

    series = judged([point(100, "a"), point(70, "b"), point(90, "c"), point(90, "d")])
    assert [p["verdict"] for p in series] == ["same", "change", "same", "same"]
    assert series[1]["ratio"] == pytest.approx(0.9) and series[1]["since"] == "a"
