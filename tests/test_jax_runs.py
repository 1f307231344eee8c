"""Real JAX runs: Flax models under one jitted step, on one host device, over a mesh of host
devices in one process (``jax``) and over processes joined by ``jax.distributed``."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from conftest import (check_images_per_sec, rank_reports, read_records, scaling_cli,
                      scaling_in_process)

pytest.importorskip("jax", reason="JAX is not installed (pip install -e '.[jax]')")

WORKLOAD_SIZES = [("alexnet", 63), ("googlenet", 32), ("resnet50", 32), ("inception_v3", 75),
                  ("cifar10", 32), ("mnist_mlp", 28)]
PARALLEL = ["jax", pytest.param("jax-distributed", marks=pytest.mark.slow)]
"""The parallel launchers; starting two processes and their coordinator takes over 10 s."""


def run_jax(out_dir, launcher="jax", workload="cifar10", devices=1, batch=4, size=16, steps=4,
            warmup=1, extra=(), env=None):
    result = scaling_cli(
        "run", "--framework", "jax", "--launcher", launcher, "--workload", workload,
        "--devices", devices, "--batch-size", batch, "--image-size", size, "--steps", steps,
        "--warmup", warmup, "--device-type", "cpu", "--timeout", 300, "--out", out_dir, *extra,
        env=env)
    assert result.returncode in (0, 1), result.stderr
    record = read_records(out_dir)[-1]
    assert result.returncode == (0 if record["status"] == "ok" else 1)
    return record


@pytest.mark.slow
@pytest.mark.parametrize("workload, size", WORKLOAD_SIZES)
def test_every_workload_trains_on_one_cpu_device(out_dir, workload, size):
    record = run_jax(out_dir, workload=workload, batch=2, size=size, steps=1)
    assert record["status"] == "ok", record["error"]
    assert record["launcher"] == "jax" and record["data_parallel"] == "mesh"
    [report] = rank_reports(record)
    assert report["compile_s"] > 0
    assert report["versions"]["flax"] and report["flops_per_image"] > 0
    check_images_per_sec(record, 2 * 1)


@pytest.mark.parametrize("launcher", PARALLEL)
def test_two_cpu_devices_train_one_global_batch(out_dir, launcher):
    record = run_jax(out_dir, launcher=launcher, devices=2, size=32)
    assert record["status"] == "ok", record["error"]
    reports = rank_reports(record)
    assert len(reports) == (1 if launcher == "jax" else 2)
    assert record["params"] == 1_756_426
    # Both devices' images count, whoever drives them: 4 per device, 2 devices, 4 steps.
    check_images_per_sec(record, 4 * 2 * 4)


def test_the_baseline_runs_without_a_mesh(out_dir):
    record = run_jax(out_dir, launcher="single")
    assert record["status"] == "ok", record["error"]
    assert record["data_parallel"] == "none"
    check_images_per_sec(record, 4 * 4)


def test_initialisers_compile_once_per_user_and_the_step_in_every_cell(tmp_path):
    """The model's initialisers go to a per-user cache, so that later cells load them; the step
    never does, so ``compile_s`` stays a compile: a cell at another batch size, whose step is
    another program, adds nothing to the cache."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    cache = tmp_path / "cache" / "scaling" / "jax-initialisers"
    assert run_jax(tmp_path / "first", launcher="single", env=env)["status"] == "ok"
    entries = set(os.listdir(cache))
    assert entries
    second = run_jax(tmp_path / "second", launcher="single", batch=6, env=env)
    assert second["status"] == "ok" and rank_reports(second)[0]["compile_s"] > 0
    assert set(os.listdir(cache)) == entries


@pytest.mark.parametrize("mode", ["forward", "forward_backward", "train"])
def test_each_mode_and_bf16_runs(out_dir, mode):
    record = run_jax(out_dir, devices=2, extra=("--mode", mode, "--option", "amp=true",
                                                "--option", "donate=false"))
    assert record["status"] == "ok", record["error"]
    [report] = rank_reports(record)
    assert report["amp_dtype"] == "bfloat16" and report["precision"] == "bf16"
    assert ("gradient_sums" in report) == (mode == "forward_backward")


@pytest.mark.slow
@pytest.mark.parametrize("launcher", PARALLEL)
def test_an_allocation_over_the_memory_cap_is_oom(out_dir, launcher):
    record = run_jax(out_dir, launcher=launcher, devices=2, batch=4096, size=32, steps=1,
                     extra=("--memory-limit", "768MiB"))
    assert record["status"] == "oom"
    assert "RESOURCE_EXHAUSTED" in record["error"]


@pytest.mark.slow
def test_the_max_batch_search_brackets_the_cap(out_dir):
    # The search is the same for every launcher; jax-distributed's out-of-memory is the test
    # above's. Two devices of one process hold about 470 MB and 6 MB more for each image of
    # the per-device batch: under 704 MiB a device, the edge lies near 170, between steps.
    result = scaling_cli("maxbatch", "--framework", "jax", "--launcher", "jax",
                         "--workload", "cifar10", "--image-size", 32, "--device-type", "cpu",
                         "--devices", 2, "--memory-limit", "704MiB", "--multiple-of", 64,
                         "--steps", 1, "--warmup", 0, "--confirm-steps", 1,
                         "--confirm-warmup", 0, "--timeout", 300, "--out", out_dir)
    assert result.returncode == 0, result.stderr
    with open(Path(out_dir) / "maxbatch.csv") as table:
        [row] = list(csv.DictReader(table))
    assert row["status"] == "ok", row
    assert int(row["min_oom_batch"]) == int(row["max_batch"]) + 64
    statuses = {(r["batch_size"], r["status"]) for r in read_records(out_dir)}
    assert (int(row["max_batch"]), "ok") in statuses
    assert (int(row["min_oom_batch"]), "oom") in statuses


@pytest.mark.parametrize("launcher", PARALLEL)
def test_the_profile_splits_the_step_and_names_the_allreduce(out_dir, launcher):
    record = run_jax(out_dir, launcher=launcher, devices=2, extra=("--profile",))
    assert record["status"] == "ok", record["error"]
    report = rank_reports(record)[0]
    shares = report["step_breakdown"]
    assert sum(shares[part] for part in ("compute", "communication", "idle")) == \
        pytest.approx(1.0)
    assert shares["compute"] > 0 and shares["communication"] > 0
    # XLA on CPU runs each collective inside its device's program, on the threads that
    # compute: none of it beside the compute.
    assert shares["communication_beside"] < shares["communication"]
    with open(report["trace"]) as trace:
        names = {event["name"] for event in json.load(trace)["traceEvents"]}
    assert any(name.startswith("collective:") for name in names)


def test_matmul_runs_under_jax(out_dir):
    result = scaling_cli("matmul", "--framework", "jax", "--device-type", "cpu",
                         "--sizes", "64,256", "--dtype", "float32", "--out", out_dir)
    assert result.returncode == 0, result.stderr
    with open(Path(out_dir) / "matmul.csv") as table:
        rows = list(csv.DictReader(table))
    assert [(r["framework"], r["n"], r["status"]) for r in rows] == [
        ("jax", "64", "ok"), ("jax", "256", "ok")]
    assert all(float(r["tflops"]) > 0 for r in rows)
