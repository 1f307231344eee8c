"""The max-batch search with real PyTorch trials under a CPU memory cap."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from conftest import read_records, scaling_cli, write_sweep

from scaling.execute.store import ResultStore

CAP = "1.1GiB"
SEARCH = ("maxbatch", "--workload", "cifar10", "--image-size", 32, "--device-type", "cpu",
          "--memory-limit", CAP, "--multiple-of", 8, "--timeout", 300)


def read_maxbatch(out_dir):
    with open(out_dir / "maxbatch.csv") as table:
        return {int(row["devices"]): row for row in csv.DictReader(table)}


def run_cell(out_dir, devices, batch):
    result = scaling_cli("run", "--workload", "cifar10", "--image-size", 32, "--devices", devices,
                         "--batch-size", batch, "--steps", 3, "--warmup", 1,
                         "--device-type", "cpu", "--memory-limit", CAP, "--timeout", 300,
                         "--out", out_dir)
    assert result.returncode in (0, 1), result.stderr
    return next(r for r in read_records(out_dir) if r["batch_size"] == batch
                and r["devices"] == devices)


def test_found_batch_runs_and_the_next_size_up_runs_out_of_memory(tmp_path, out_dir):
    result = scaling_cli(*SEARCH, "--devices", "1,2", "--headroom", 0.9, "--out", out_dir)
    assert result.returncode == 0, result.stderr
    found = read_maxbatch(out_dir)
    assert set(found) == {1, 2}
    for devices, row in found.items():
        assert row["status"] == "ok"
        best, smallest_oom = int(row["max_batch"]), int(row["min_oom_batch"])
        assert best % 8 == 0 and smallest_oom == best + 8
        assert int(row["safe_batch"]) == int(best * 0.9) // 8 * 8
        assert float(row["images_per_sec"]) > 0 and int(row["trials"]) >= 3

        check = tmp_path / f"check{devices}"
        assert run_cell(check, devices, best)["status"] == "ok"
        assert run_cell(check, devices, best + 8)["status"] == "oom"

    trials = read_records(out_dir)
    assert {r["purpose"] for r in trials} == {"maxbatch"}
    assert sum(int(row["trials"]) for row in found.values()) == len(trials)


def test_a_non_oom_failure_stops_the_search_with_its_status(out_dir):
    env = {**os.environ, "SCALING_FAULT": "error@0:0"}
    result = scaling_cli(*SEARCH, "--devices", "1", "--out", out_dir, env=env)
    assert result.returncode == 0, result.stderr
    row = read_maxbatch(out_dir)[1]
    assert row["status"] == "error"
    assert "injected fault" in row["error"]
    assert row["max_batch"] == "" and row["min_oom_batch"] == ""
    assert row["trials"] == "1"


def test_killed_search_resumes_without_repeating_a_trial(out_dir):
    argv = [sys.executable, "-m", "scaling", *map(str, SEARCH), "--devices", "1",
            "--out", str(out_dir)]
    search = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while len(ResultStore(out_dir).records()) < 3:
        assert time.monotonic() < deadline and search.poll() is None
        time.sleep(0.2)
    search.send_signal(signal.SIGKILL)
    search.wait()
    before = {r["cell"] for r in read_records(out_dir)}

    resumed = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr
    counts = Counter(r["cell"] for r in read_records(out_dir))
    assert before <= set(counts)
    assert set(counts.values()) == {1}
    row = read_maxbatch(out_dir)[1]
    assert row["status"] == "ok" and int(row["trials"]) == len(counts)


def test_sweep_runs_at_the_found_batch_and_a_fraction_of_it(tmp_path, out_dir):
    config = write_sweep(tmp_path / "max.yaml", batch_sizes=["max", "max*0.5"], image_size=32,
                         memory_limit=CAP, maxbatch={"multiple_of": 8, "min": 8})
    result = scaling_cli("sweep", config, "--out", out_dir)
    assert result.returncode == 0, result.stderr
    best = int(read_maxbatch(out_dir)[1]["max_batch"])
    sweep_cells = [r for r in read_records(out_dir) if r["purpose"] == "sweep"]
    assert sorted(r["batch_size"] for r in sweep_cells) == [best // 2 // 8 * 8, best]
    assert all(r["status"] == "ok" for r in sweep_cells)


@pytest.mark.parametrize("args, message", [
    (("--devices", "1", "--multiple-of", 0), "--multiple-of must be positive"),
    (("--devices", "1", "--min", 12, "--multiple-of", 8), "--min must be a positive multiple"),
    (("--devices", "0"), "--devices must list positive counts"),
])
def test_bad_search_bounds_are_refused(out_dir, args, message):
    result = scaling_cli(*SEARCH, *args, "--out", out_dir)
    assert result.returncode == 2 and message in result.stderr


def test_tensorflow_found_batch_runs_and_the_next_size_up_runs_out_of_memory(tmp_path,
                                                                             out_dir):
    tf_cell = ("--framework", "tensorflow", "--launcher", "tf-mirrored", "--workload", "cifar10",
               "--image-size", 32, "--device-type", "cpu", "--memory-limit", "256MiB",
               "--timeout", 300)
    # Near the cap TensorFlow's BFC allocator fits or fails the same batch from run to run
    # (batches 240 and 248 both do, about one run in eight against the majority), so single
    # runs outside the search are repeatable only at a granularity wider than that band.
    result = scaling_cli("maxbatch", *tf_cell, "--multiple-of", 32, "--out", out_dir)
    assert result.returncode == 0, result.stderr
    row = read_maxbatch(out_dir)[1]
    assert row["status"] == "ok"
    best = int(row["max_batch"])
    assert int(row["min_oom_batch"]) == best + 32

    check = tmp_path / "check"
    for batch, status in ((best, "ok"), (best + 32, "oom")):
        ran = scaling_cli("run", *tf_cell, "--batch-size", batch, "--steps", 3, "--warmup", 1,
                          "--out", check)
        assert ran.returncode == (0 if status == "ok" else 1), ran.stderr
        assert read_records(check)[-1]["status"] == status
