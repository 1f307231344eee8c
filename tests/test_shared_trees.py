"""Shared process trees (``scaling.execute.trees``): cells whose launch matches run one after
another in one process tree, in their turn; a failed cell ends its tree, and the next cell of
its kind starts a tree of its own."""

from __future__ import annotations

import os

import pytest
from conftest import (check_images_per_sec, leftover_cell_processes, rank_reports, read_records,
                      scaling_cli, scaling_cli_ok, write_sweep)

from scaling.cell import make_cell
from scaling.execute.trees import shareable
from scaling.placement import local_placement


def tiny_sweep(path, **overrides):
    """Tiny one-thread cells: what is shown is where each cell ran, not its pace."""
    return write_sweep(path, threads_per_device=1, **overrides)


def tree_of(record):
    return record["process_tree"]["tree"]


@pytest.mark.slow
def test_cells_whose_launch_matches_run_in_turn_in_one_tree_per_kind(tmp_path):
    out = tmp_path / "out"
    scaling_cli_ok("sweep", tiny_sweep(tmp_path / "sweep.yaml", devices=[1, 2],
                                       batch_sizes=[2, 4], single_baseline=True), "--out", out)
    records = read_records(out)
    assert len({r["cell"] for r in records}) == len(records) == 8
    assert {r["status"] for r in records} == {"ok"}
    trees = {}
    for record in records:  # in the order they ran
        trees.setdefault((record["launcher"], record["devices"]), []).append(record)
    assert sorted(trees) == [("single", 1), ("torchrun", 1), ("torchrun", 2)]
    for kind in trees.values():
        assert len({tree_of(r) for r in kind}) == 1
        assert [r["process_tree"]["position"] for r in kind] == list(range(1, len(kind) + 1))
        assert len({r["process_token"] for r in kind}) == 1
        for record in kind:
            check_images_per_sec(record, record["batch_size"] * record["devices"]
                                 * record["steps_timed"])
        # The later cells were sent to a tree that was already up: no interpreter, no import.
        first, *later = kind
        assert all(r["wall_breakdown"]["start"] < first["wall_breakdown"]["start"] +
                   first["wall_breakdown"]["build"] for r in later)
    assert len({tree_of(kind[0]) for kind in trees.values()}) == 3
    # The three trees started together, in the first cell, each rank importing torch on its
    # own: every rank of every kind was up before the sweep's first window.
    first_window = min(report["start"] for report in rank_reports(records[0]))
    assert all(report["process_started"] < first_window
               for kind in trees.values() for report in rank_reports(kind[0]))
    # The trees ended with the sweep.
    assert not any(leftover_cell_processes(record) for record in records)
    assert not (out / "trees").exists()


@pytest.mark.slow
def test_a_crashed_cell_ends_its_tree_alone_and_the_next_cell_starts_its_own(tmp_path):
    out = tmp_path / "out"
    result = scaling_cli("sweep", tiny_sweep(tmp_path / "sweep.yaml", batch_sizes=[2, 4, 8]),
                         "--out", out, env={**os.environ, "SCALING_FAULT": "crash@0:1:4"})
    assert result.returncode == 1, result.stdout + result.stderr
    two, four, eight = sorted(read_records(out), key=lambda r: r["batch_size"])
    assert (two["status"], four["status"], eight["status"]) == ("ok", "crashed", "ok")
    assert four["error"] == "rank 0 killed by SIGKILL"
    assert tree_of(four) == tree_of(two) != tree_of(eight)
    assert [r["process_tree"]["position"] for r in (two, four, eight)] == [1, 2, 1]
    assert not any(leftover_cell_processes(record) for record in (two, four, eight))


def cell(**changes):
    fields = dict(framework="torch", launcher="torchrun", workload="cifar10", devices=1,
                  batch_size=4, image_size=16, steps=3, warmup=1, device_type="cpu",
                  threads_per_device=1)
    return make_cell(**{**fields, **changes})


def test_only_sweep_cells_of_a_keeping_mechanism_on_one_node_without_a_cap_share():
    here = local_placement(1)
    assert shareable(cell(), here)
    assert shareable(cell(launcher="single"), here)
    assert not shareable(cell(launcher="horovod"), here)
    assert not shareable(cell(framework="jax", launcher="jax"), here)
    assert not shareable(cell(memory_limit=2**31), here)
    assert not shareable(cell(purpose="maxbatch"), here)
    assert not shareable(cell(nodes=2), local_placement(1, nodes=2, rendezvous="n0:29500"))
