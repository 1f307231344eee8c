"""What a cell costs: where its wall time goes (``wall_breakdown``), and the references after
its window, timed once per point or not at all."""

from __future__ import annotations

import csv
import json
import os

import pytest
from conftest import read_records, scaling_cli_ok, scaling_in_process, write_sweep
from test_bad_input import assert_one_line_error

from scaling.execute.wall import REFERENCES, wall_breakdown, window_share
from scaling.report.references import with_shared_references
from scaling.sweep import expand, parse_sweep


def test_each_phase_runs_from_the_end_of_the_one_before_it():
    report = {"marks": {"entered": 11.5, "first_step": 13.0, "allreduce": 31.0,
                        "local_steps": 35.0}, "start": 15.0, "end": 30.0}
    assert wall_breakdown(10.0, 10.5, 36.0, 36.25, report) == {
        "before_launch": 0.5, "start": 1.0, "build": 1.5, "warmup": 2.0, "window": 15.0,
        "allreduce": 1.0, "local_steps": 4.0, "teardown": 1.0, "after": 0.25, "total": 26.25}


def test_a_cell_that_failed_before_its_first_step_spent_its_tree_starting():
    assert wall_breakdown(0.0, 1.0, 4.0, 4.5, None) == {
        "before_launch": 1.0, "start": 3.0, "after": 0.5, "total": 4.5}


def test_the_windows_share_is_over_every_cell_that_has_a_breakdown():
    records = [{"wall_breakdown": {"window": 6.0, "total": 10.0}},
               {"wall_breakdown": {"start": 5.0, "total": 5.0}}, {"status": "oom"}]
    assert window_share(records) == {"window_s": 6.0, "wall_s": 15.0, "share": 0.4}
    assert window_share([{"status": "ok"}]) is None


def sweep_cells(**keys):
    return expand(parse_sweep({"frameworks": {"torch": {"launchers": ["torchrun"]}},
                               "workloads": ["cifar10"], "batch_sizes": [4], "devices": [1, 2],
                               "device_type": "cpu", "repeats": 2, **keys}))


@pytest.mark.parametrize("policy, timed", [
    ("first", {("single", 1, 0), ("torchrun", 1, 0), ("torchrun", 2, 0)}),
    ("every", {("single", 1, 0), ("torchrun", 1, 0), ("torchrun", 2, 0), ("single", 1, 1),
               ("torchrun", 1, 1), ("torchrun", 2, 1), ("single", 1, 2)}),
    ("none", set())])
def test_the_references_setting_says_which_repeats_time_them(policy, timed):
    cells = sweep_cells(references=policy)
    assert {(c.launcher, c.devices, c.repeat) for c in cells if c.references} == timed
    # Whether a cell times them is not part of what it measures: resume finds it either way.
    assert [c.cell_id for c in cells] == [c.cell_id for c in sweep_cells()]


def test_a_repeat_without_references_takes_its_points_and_never_another_points():
    def record(cell, repeat, references, local=None, devices=2):
        return {"cell": cell, "framework": "torch", "launcher": "torchrun", "devices": devices,
                "workload": "cifar10", "repeat": repeat, "references": references,
                "status": "ok", "local_step_s": local, "hosts": ["vm"]}
    rows = with_shared_references([record("a", 0, True, 0.5), record("b", 1, False),
                                   record("c", 1, False, devices=4)])
    assert [(r["references_from"], r["local_step_s"]) for r in rows] == [
        ("a", 0.5), ("a", 0.5), (None, None)]


def test_an_unknown_references_setting_names_the_valid_ones(tmp_path):
    sweep = write_sweep(tmp_path / "sweep.yaml", references="some")
    assert_one_line_error(scaling_in_process("sweep", sweep, "--out", tmp_path / "out"),
                          "references must be one of first, every, none, got 'some'")
    result = scaling_in_process("sweep", write_sweep(tmp_path / "ok.yaml"), "--references",
                                "all", "--out", tmp_path / "out")
    assert_one_line_error(result, "'all' is not one of 'first', 'every', 'none'")


@pytest.mark.slow
def test_throughput_alone_times_the_window_and_nothing_after_it(tmp_path):
    out = tmp_path / "out"
    result = scaling_cli_ok("sweep", write_sweep(tmp_path / "sweep.yaml", devices=[2]),
                            "--references", "none", "--out", out)
    [record] = read_records(out)
    assert (record["status"], record["references"]) == ("ok", False)
    assert record["allreduce_time_s"] is record["local_step_s"] is None
    assert set(record["wall_breakdown"]) == {"before_launch", "start", "build", "warmup",
                                             "window", "teardown", "after", "total"}
    with open(out / "results.csv") as table:
        [row] = csv.DictReader(table)
    assert row["predicted_images_per_sec"] == row["local_step_s"] == ""
    assert "Windows:" in result.stdout


@pytest.mark.slow
def test_a_run_without_references_and_a_flop_count_kept_per_user(tmp_path):
    """``scaling run --no-references`` times throughput alone; the FLOP count of a workload is
    counted once per user (``~/.cache/scaling/flops.json``), and a later run in another folder
    reads it there rather than count again: here, a count planted in the cache."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    cell = ("run", "--launcher", "single", "--workload", "cifar10", "--image-size", 16,
            "--batch-size", 4, "--steps", 3, "--warmup", 1, "--device-type", "cpu",
            "--no-references")
    scaling_cli_ok(*cell, "--out", tmp_path / "first", env=env)
    [record] = read_records(tmp_path / "first")
    assert (record["status"], record["references"], record["local_step_s"]) == ("ok", False, None)
    assert not set(record["wall_breakdown"]) & set(REFERENCES)
    cache = tmp_path / "cache" / "scaling" / "flops.json"
    [(key, count)] = json.loads(cache.read_text()).items()
    assert count == record["flops_per_image"] > 0
    assert json.loads(key)[-3:] == ["cifar10", 16, "train"]
    cache.write_text(json.dumps({key: 12345.0}))
    scaling_cli_ok(*cell, "--out", tmp_path / "second", env=env)
    [again] = read_records(tmp_path / "second")
    assert again["flops_per_image"] == 12345.0
