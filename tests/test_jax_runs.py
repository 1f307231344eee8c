"""Real JAX runs: Flax models under one jitted step, on one host device, over a mesh of host
devices in one process (``jax``) and over processes joined by ``jax.distributed``.

Each cell is a process tree of its own (JAX cells share none), so the tests share cells: a
module fixture runs one sweep, or one cell, whose records several tests read. Sweeps time no
references after the window: no test here reads the scaling model's fields."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from conftest import (check_images_per_sec, rank_reports, read_records, scaling_cli,
                      swept_records, write_sweep)

pytest.importorskip("jax", reason="JAX is not installed (pip install -e '.[jax]')")

WORKLOAD_SIZES = {"alexnet": 75, "googlenet": 32, "resnet50": 32, "inception_v3": 75,
                  "cifar10": 32, "mnist_mlp": 32}
"""Each workload's side: 75 for the two that need more than 32 (AlexNet takes 63 and up,
Inception v3 75), 32 for the others; one sweep per side."""
PARALLEL = ["jax", pytest.param("jax-distributed", marks=pytest.mark.slow)]
"""The parallel launchers; starting two processes and their coordinator takes over 10 s."""
MODES = ["forward", "forward_backward", "train"]
SINGLE = {"jax": {"launchers": ["single"]}}


def run_jax(out_dir, launcher="jax", workload="cifar10", devices=1, batch=4, size=16, steps=4,
            warmup=1, extra=(), env=None):
    """One ``scaling run`` cell (it times the references after its window)."""
    result = scaling_cli(
        "run", "--framework", "jax", "--launcher", launcher, "--workload", workload,
        "--devices", devices, "--batch-size", batch, "--image-size", size, "--steps", steps,
        "--warmup", warmup, "--device-type", "cpu", "--timeout", 300, "--out", out_dir, *extra,
        env=env)
    assert result.returncode in (0, 1), result.stderr
    record = read_records(out_dir)[-1]
    assert result.returncode == (0 if record["status"] == "ok" else 1)
    return record


def sweep_jax(folder: Path, env=None, **spec) -> list:
    """The records of one ``scaling sweep`` of JAX cells on CPU devices, in ``folder``: by
    default one ``jax`` cell of the CIFAR-10 network at side 16, batch 4, 4 steps after 1 of
    warm-up, with no references; ``spec`` overrides (conftest's ``write_sweep`` keys)."""
    spec = {"frameworks": {"jax": {"launchers": ["jax"]}}, "image_size": 16, "steps": 4,
            "warmup": 1, "timeout_s": 300, "references": "none", **spec}
    folder.mkdir(parents=True, exist_ok=True)
    return swept_records(write_sweep(folder / "sweep.yaml", **spec), folder / "out", env=env,
                         timeout=1800)


@pytest.fixture(scope="module")
def every_workload(tmp_path_factory) -> dict:
    """Each workload's cell on one CPU device under the ``jax`` launcher (a mesh of one
    device), batch 2, one step: its record by workload."""
    records = {}
    for size in sorted(set(WORKLOAD_SIZES.values())):
        names = [name for name, side in WORKLOAD_SIZES.items() if side == size]
        for record in sweep_jax(tmp_path_factory.mktemp(f"workloads{size}"), workloads=names,
                                batch_sizes=[2], image_size=size, steps=1):
            records[record["workload"]] = record
    return records


@pytest.mark.slow
@pytest.mark.parametrize("workload", WORKLOAD_SIZES)
def test_every_workload_trains_on_one_cpu_device(every_workload, workload):
    record = every_workload[workload]
    assert record["status"] == "ok", record["error"]
    assert record["launcher"] == "jax" and record["data_parallel"] == "mesh"
    [report] = rank_reports(record)
    assert report["compile_s"] > 0
    assert report["versions"]["flax"] and report["flops_per_image"] > 0
    check_images_per_sec(record, 2 * 1)


@pytest.fixture(scope="module", params=PARALLEL)
def two_device_cell(request, tmp_path_factory) -> tuple:
    """The launcher, and its train cell of the CIFAR-10 network at side 32 on two CPU devices,
    profiled after its window (the profiled steps are outside the window): what the global
    batch and the profile tests read."""
    launcher = request.param
    [record] = sweep_jax(tmp_path_factory.mktemp(launcher),
                         frameworks={"jax": {"launchers": [launcher]}}, devices=[2],
                         image_size=32, profile=True)
    return launcher, record


def test_two_cpu_devices_train_one_global_batch(two_device_cell):
    launcher, record = two_device_cell
    assert record["status"] == "ok", record["error"]
    reports = rank_reports(record)
    assert len(reports) == (1 if launcher == "jax" else 2)
    assert record["params"] == 1_756_426
    # Both devices' images count, whoever drives them: 4 per device, 2 devices, 4 steps.
    check_images_per_sec(record, 4 * 2 * 4)


@pytest.fixture(scope="module")
def single_cell(tmp_path_factory) -> tuple:
    """The first ``single`` cell (one device, no mesh) of a user whose cache folder is new: its
    record, the environment that names that folder, the initialisers' cache in it, and the
    entries the cell left there."""
    tmp = tmp_path_factory.mktemp("single")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp / "cache")}
    cache = tmp / "cache" / "scaling" / "jax-initialisers"
    [record] = sweep_jax(tmp / "first", env=env, frameworks=SINGLE)
    return record, env, cache, set(os.listdir(cache)) if cache.is_dir() else set()


def test_the_baseline_runs_without_a_mesh(single_cell):
    record = single_cell[0]
    assert record["status"] == "ok", record["error"]
    assert record["data_parallel"] == "none"
    check_images_per_sec(record, 4 * 4)


def test_initialisers_compile_once_per_user_and_the_step_in_every_cell(single_cell, tmp_path):
    """The model's initialisers go to a per-user cache, so that later cells load them; the step
    never does, so ``compile_s`` stays a compile: a cell at another batch size, whose step is
    another program (and whose references compile the local step), adds nothing to the
    cache."""
    first, env, cache, entries = single_cell
    assert first["status"] == "ok", first["error"]
    assert entries
    second = run_jax(tmp_path / "second", launcher="single", batch=6, env=env)
    assert second["status"] == "ok" and rank_reports(second)[0]["compile_s"] > 0
    assert set(os.listdir(cache)) == entries


@pytest.fixture(scope="module")
def bf16_modes(tmp_path_factory) -> dict:
    """A cell in each mode on two CPU devices, in bfloat16 and without donation: its record by
    mode."""
    records = sweep_jax(tmp_path_factory.mktemp("modes"), devices=[2], modes=MODES,
                        frameworks={"jax": {"launchers": ["jax"],
                                            "options": {"amp": True, "donate": False}}})
    return {record["mode"]: record for record in records}


@pytest.mark.parametrize("mode", MODES)
def test_each_mode_and_bf16_runs(bf16_modes, mode):
    record = bf16_modes[mode]
    assert record["status"] == "ok", record["error"]
    [report] = rank_reports(record)
    assert report["amp_dtype"] == "bfloat16" and report["precision"] == "bf16"
    assert ("gradient_sums" in report) == (mode == "forward_backward")


@pytest.fixture(scope="module")
def max_batch_search(tmp_path_factory) -> tuple:
    """The max-batch search of the CIFAR-10 network at side 32 on two devices of one process
    under a cap: its ``maxbatch.csv`` row and its trials' records.

    Two devices of one process hold about 470 MB and 6 MB more for each image of the
    per-device batch: under 704 MiB a device, the edge lies near 170, between steps."""
    out = tmp_path_factory.mktemp("maxbatch") / "out"
    result = scaling_cli("maxbatch", "--framework", "jax", "--launcher", "jax",
                         "--workload", "cifar10", "--image-size", 32, "--device-type", "cpu",
                         "--devices", 2, "--memory-limit", "704MiB", "--multiple-of", 64,
                         "--steps", 1, "--warmup", 0, "--confirm-steps", 1,
                         "--confirm-warmup", 0, "--timeout", 300, "--out", out)
    assert result.returncode == 0, result.stderr
    with open(out / "maxbatch.csv") as table:
        [row] = list(csv.DictReader(table))
    return row, read_records(out)


@pytest.mark.slow
@pytest.mark.parametrize("launcher", PARALLEL)
def test_an_allocation_over_the_memory_cap_is_oom(request, tmp_path, launcher):
    if launcher == "jax":
        # The max-batch search's trials over its cap are jax cells that allocate over it.
        row, records = request.getfixturevalue("max_batch_search")
        record = next(r for r in records if r["batch_size"] == int(row["min_oom_batch"]))
    else:
        record = run_jax(tmp_path / "out", launcher=launcher, devices=2, batch=4096, size=32,
                         steps=1, extra=("--memory-limit", "768MiB"))
    assert record["status"] == "oom"
    if launcher == "jax-distributed" or "RESOURCE_EXHAUSTED" in record["error"]:
        assert record["oom_evidence"].startswith("framework error: JaxRuntimeError: "
                                                 "RESOURCE_EXHAUSTED")
    else:
        # Just over the search's edge, an XLA kernel's scratch memory may run out before XLA's
        # own buffers do ("INTERNAL: YNNPACK operation failed"): oom on the cap's evidence.
        assert " cap" in record["oom_evidence"], record


@pytest.mark.slow
def test_the_max_batch_search_brackets_the_cap(max_batch_search):
    # The search is the same for every launcher; jax-distributed's out-of-memory is the test
    # above's. The fixture says where the edge lies.
    row, records = max_batch_search
    assert row["status"] == "ok", row
    assert int(row["min_oom_batch"]) == int(row["max_batch"]) + 64
    statuses = {(r["batch_size"], r["status"]) for r in records}
    assert (int(row["max_batch"]), "ok") in statuses
    assert (int(row["min_oom_batch"]), "oom") in statuses


def test_the_profile_splits_the_step_and_names_the_allreduce(two_device_cell):
    _, record = two_device_cell
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
