"""A history of real runs (``--history FILE``, ``scaling history``): a node slowed by a CPU
quota is a change once a second run confirms it, a run beside a busy neighbour is a one-off
and no change, and two nodes keep trends of their own.

Every run's one-thread cell runs in a CPU group of its own, ahead of the machine's other work
(ten times its weight), so that whatever else the machine runs moves its images/sec little;
the group's quota of one core holds it and anything beside it in the group. The node is slowed
by lowering the quota to 0.3 of a core (about -70%); the busy neighbour is a process spinning
in the same group (about -50%). Changes are reported from 25%, beyond what two runs of the
same tiny cell differ by here."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import scaling_cli, write_sweep
from cpugroup import AHEAD_SHARES, cpu_group, join

PERIOD_US = 10000


@pytest.fixture
def group(tmp_path):
    with cpu_group(f"scaling-history-{os.getpid()}-{tmp_path.name}", shares=AHEAD_SHARES,
                   cfs_period_us=PERIOD_US, cfs_quota_us=PERIOD_US) as made:
        yield made


def run_into(history, tmp_path, name, group, node="node-a"):
    """One real run of a tiny cell, added to ``history`` by the sweep itself."""
    config = write_sweep(tmp_path / f"{name}.yaml", name=name, min_time_s=2,
                         threads_per_device=1)
    ran = scaling_cli("sweep", config, "--out", tmp_path / name, "--history", history,
                      env={**os.environ, "SCALING_NODE_NAME": node}, cpu_group=group)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"points to the history {history}" in ran.stdout


def trend(history, tmp_path):
    """The history's verdicts by node, and its summary line."""
    shown = scaling_cli("history", history, "--min-change", "0.25", "--json",
                        tmp_path / "history.json")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    series = json.loads((tmp_path / "history.json").read_text())
    return ({entry["node"]: [point["verdict"] for point in entry["points"]] for entry in series},
            shown.stdout, series)


@pytest.mark.slow
def test_a_slowed_node_is_a_change_once_confirmed_and_a_busy_neighbour_is_not(tmp_path, group):
    history = tmp_path / "history.duckdb"
    run_into(history, tmp_path, "first", group)
    neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                 preexec_fn=lambda: join(group))
    try:
        run_into(history, tmp_path, "busy", group)
    finally:
        neighbour.kill()
        neighbour.wait()
    run_into(history, tmp_path, "again", group)
    verdicts, shown, _ = trend(history, tmp_path)
    assert verdicts == {"node-a": ["same", "not confirmed", "same"]}
    assert "no confirmed change" in shown.splitlines()[-1]

    (group / "cpu.cfs_quota_us").write_text(str(PERIOD_US * 3 // 10))
    run_into(history, tmp_path, "slowed", group)
    verdicts, shown, _ = trend(history, tmp_path)
    assert verdicts["node-a"][-1] == "unconfirmed"
    assert "no confirmed change, 1 unconfirmed" in shown

    run_into(history, tmp_path, "slowed-again", group)
    (group / "cpu.cfs_quota_us").write_text(str(PERIOD_US))
    run_into(history, tmp_path, "other-node", group, node="node-b")
    verdicts, shown, series = trend(history, tmp_path)
    assert verdicts == {"node-a": ["same", "not confirmed", "same", "change", "same"],
                        "node-b": ["same"]}
    [changed] = [point for entry in series for point in entry["points"]
                 if point["verdict"] == "change"]
    assert changed["ratio"] < 0.6 and changed["run"] == str(tmp_path / "slowed")
    assert changed["since"] == str(tmp_path / "first")  # the level the later runs kept
    assert "1 confirmed change(s)" in shown and shown.rstrip().splitlines()[-1].startswith(
        "cifar10 16px, torch / torchrun, batch 4 1 thread, 1 device(s) on node-a: -")

    again = scaling_cli("history", "add", history, tmp_path / "first")
    assert again.returncode == 0, again.stderr  # added again: its points replaced, not doubled
    assert trend(history, tmp_path)[0] == verdicts

    page = tmp_path / "history.html"
    drawn = scaling_cli("history", history, "--html", page)
    assert drawn.returncode == 0, drawn.stderr
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
