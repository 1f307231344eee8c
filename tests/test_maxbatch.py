"""The max-batch search with real trials under a CPU memory cap.

Each test checks what the search did, from its records: the statuses of the trials at each
batch, how many ran, and the bracket it ended with. tests/test_batchsearch.py drives the same
search against a simulated device.
"""

from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import fields

import pytest
from conftest import rank_reports, read_records, scaling_cli, scaling_in_process, write_sweep

from scaling.errors import ScalingError
from scaling.execute.store import ResultStore
from scaling.maxbatch.search import (MaxBatchResult, TrialRunner, check_search_bounds,
                                     find_max_batches, trial_factory)
from scaling.schema import MAXBATCH_FIELDS
from scaling.units import parse_bytes

CAP = "1.1GiB"
# The base of a PyTorch rank takes nearly 1 GiB of the cap, and CIFAR-10 at 32x32 about 1.3 MB
# a sample more: the edge is near 150 images at one device. Searches step by STEP.
STEP = 64
# Confirmations run a plain cell's 20 steps after 5 of warm-up by default; these searches
# confirm with two steps and no warm-up: as many steps as a trial (one after one of warm-up),
# so that a confirmation reaches the peak of a trial's second step (PyTorch's optimizer state
# is there from then on), and a split other than a trial's, so that each confirmation shows
# that it ran the confirmations' steps and warm-up.
CONFIRM = (2, 0)
SEARCH = ("maxbatch", "--workload", "cifar10", "--image-size", 32, "--device-type", "cpu",
          "--memory-limit", CAP, "--timeout", 300,
          "--confirm-steps", CONFIRM[0], "--confirm-warmup", CONFIRM[1])
# TensorFlow's allocator peak grows over a confirmation's steps: its confirmations run four.
TF_CONFIRM = (3, 1)


def read_maxbatch(out_dir):
    with open(out_dir / "maxbatch.csv") as table:
        return {int(row["devices"]): row for row in csv.DictReader(table)}


def runs_by_batch(out_dir, devices=1, purpose="maxbatch"):
    """Batch -> the statuses of its runs of ``purpose`` (trials by default) at ``devices``, in
    the order they ran."""
    runs = {}
    for record in read_records(out_dir):
        if record["devices"] == devices and record["purpose"] == purpose:
            runs.setdefault(record["batch_size"], []).append(record["status"])
    return runs


def assert_confirmed(out_dir, row, step, confirm=CONFIRM):
    """The answer fitted its trial and passed its last confirmations, at least two, each run
    with the confirmations' steps and warm-up ``confirm``; the smallest OOM ran out of memory
    on its last run; the search ended on the answer's confirmations."""
    devices, best = int(row["devices"]), int(row["max_batch"])
    smallest_oom = int(row["min_oom_batch"])
    assert row["status"] == "ok" and smallest_oom >= best + step
    confirmations = int(row["confirmations"])
    assert confirmations >= 2
    runs = runs_by_batch(out_dir, devices)
    assert runs[best][-1] == "ok"
    assert runs_by_batch(out_dir, devices, "confirmation")[best] == ["ok"] * confirmations
    mine = [r for r in read_records(out_dir) if r["devices"] == devices]
    assert [(r["purpose"], r["batch_size"]) for r in mine[-confirmations:]] == [
        ("confirmation", best)] * confirmations
    assert all((r["steps"], r["warmup"]) == confirm for r in mine[-confirmations:])
    oom_runs = runs.get(smallest_oom, []) + runs_by_batch(out_dir, devices, "confirmation").get(
        smallest_oom, [])
    assert oom_runs[-1] == "oom"
    assert int(row["trials"]) == len(mine)


@pytest.fixture(scope="module")
def killed_search(tmp_path_factory):
    """One search over 1 and 2 devices, killed once it has recorded two trials and run again
    to its end, for the tests that read it: the folder, the cells recorded before the kill and
    the resumed search's result. A step of 64 from 64 brackets the edge (near 150 images at
    one device, 170 at two) in a few trials, and leaves the answer well under the cap."""
    out_dir = tmp_path_factory.mktemp("search") / "out"
    argv = [sys.executable, "-m", "scaling", *map(str, SEARCH), "--multiple-of", str(STEP),
            "--devices", "1,2", "--min", str(STEP), "--steps", "1", "--headroom", "0.9",
            "--out", str(out_dir)]
    search = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while len(ResultStore(out_dir).records()) < 2:
        assert search.poll() is None, "the search ended before it could be killed"
        time.sleep(0.2)
    search.send_signal(signal.SIGKILL)
    search.wait()
    before = {r["cell"] for r in read_records(out_dir)}
    resumed = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    return out_dir, before, resumed


@pytest.mark.slow
def test_found_batch_runs_and_the_next_size_up_runs_out_of_memory(killed_search):
    out_dir, _, result = killed_search
    assert result.returncode == 0, result.stderr
    found = read_maxbatch(out_dir)
    assert set(found) == {1, 2}
    for devices, row in found.items():
        assert_confirmed(out_dir, row, STEP)
        best = int(row["max_batch"])
        assert int(row["safe_batch"]) == max(STEP, int(best * 0.9) // STEP * STEP)
        assert float(row["images_per_sec"]) > 0
    # Two devices start at the answer for one (or the trial it stood on before a
    # confirmation moved it down).
    two = [r for r in read_records(out_dir) if r["devices"] == 2]
    assert two[0]["batch_size"] in runs_by_batch(out_dir, 1)
    records = read_records(out_dir)
    assert {r["purpose"] for r in records} == {"maxbatch", "confirmation"}
    assert all(r["oom_evidence"] for r in records if r["status"] == "oom")
    # Trials and confirmations do all of a plain cell's work besides its steps (its compute
    # facts, and at 2 devices the gradients' allreduce and the contended compute after the
    # window), whose memory counts too.
    for purpose in ("maxbatch", "confirmation"):
        run = next(r for r in two if r["purpose"] == purpose and r["status"] == "ok")
        for report in rank_reports(run):
            assert report["flops_per_image"] > 0 and report["gradient_allreduce"]
            assert any(key.startswith("local_step") for key in report)


@pytest.mark.slow
def test_a_trial_that_fails_otherwise_twice_stops_the_search_naming_its_batch(out_dir):
    # Under single, the cheapest launcher: the search's retry is what is tested.
    env = {**os.environ, "SCALING_FAULT": "error@0:0"}
    result = scaling_cli(*SEARCH, "--launcher", "single", "--multiple-of", 8, "--devices", "1",
                         "--steps", 1, "--warmup", 0, "--out", out_dir, env=env)
    assert result.returncode == 1, result.stderr  # the search gave no answer
    row = read_maxbatch(out_dir)[1]
    assert (row["status"], row["failed_batch"], row["trials"]) == ("error", "8", "2")
    assert row["error"] == ("batch 8 ended error twice: rank 0: RuntimeError: injected fault at "
                            "rank 0, step 0")
    assert row["max_batch"] == "" and row["min_oom_batch"] == ""
    trials = read_records(out_dir)
    assert [(r["batch_size"], r["repeat"], r["status"]) for r in trials] == [
        (8, 0, "error"), (8, 1, "error")]
    assert all(r["oom_evidence"] is None for r in trials)


@pytest.mark.slow
def test_killed_search_resumes_without_repeating_a_trial(killed_search):
    out_dir, before, resumed = killed_search
    assert resumed.returncode == 0, resumed.stderr
    counts = Counter(r["cell"] for r in read_records(out_dir))
    assert before < set(counts)
    assert set(counts.values()) == {1}
    for row in read_maxbatch(out_dir).values():
        assert_confirmed(out_dir, row, STEP)
        devices = int(row["devices"])
        assert int(row["trials"]) == len({r["cell"] for r in read_records(out_dir)
                                          if r["devices"] == devices})


@pytest.mark.slow
def test_sweep_runs_at_the_found_batch_and_a_fraction_of_it(tmp_path, out_dir):
    # The search stops at its maximum, which fits: the sweep needs an answer, not the limit.
    # Under single, the cheapest launcher (what is tested is the sweep's use of the answer),
    # and the sweep's cells time no references.
    config = write_sweep(tmp_path / "max.yaml", frameworks={"torch": {"launchers": ["single"]}},
                         batch_sizes=["max", "max*0.5"], image_size=32, steps=1, warmup=0,
                         memory_limit=CAP, references="none",
                         maxbatch={"multiple_of": 8, "min": 48, "max": 64, "steps": 1,
                                   "warmup": 0})
    result = scaling_cli("sweep", config, "--out", out_dir)
    assert result.returncode == 0, result.stderr
    assert read_maxbatch(out_dir)[1]["max_batch"] == "64"
    records = read_records(out_dir)
    assert [(r["purpose"], r["batch_size"], r["status"]) for r in records] == [
        ("maxbatch", 48, "ok"), ("maxbatch", 64, "ok"), ("confirmation", 64, "ok"),
        ("confirmation", 64, "ok"), ("sweep", 64, "ok"), ("sweep", 32, "ok")]
    # The confirmations ran the sweep's steps and warm-up.
    assert [(r["steps"], r["warmup"]) for r in records[2:4]] == [(1, 0)] * 2


@pytest.mark.parametrize("bounds, message", [
    ((0, None, None, None), "--multiple-of must be positive"),
    ((8, 12, None, None), "--min must be a positive multiple of 8"),
    ((8, 16, 8, None), "--max 8 is below --min 16"),
    ((8, None, None, 1.5), "--headroom must be in (0, 1]"),
])
def test_bad_search_bounds_are_refused(bounds, message):
    with pytest.raises(ScalingError, match=re.escape(message)):
        check_search_bounds(*bounds, device_type="cpu", memory_limit=2**30)


def test_every_column_of_the_max_batch_table_is_documented():
    assert [f.name for f in fields(MaxBatchResult)] == list(MAXBATCH_FIELDS)


def test_a_cpu_search_without_a_memory_cap_is_refused_on_the_command_line(out_dir):
    result = scaling_in_process("maxbatch", "--workload", "cifar10", "--device-type", "cpu",
                                "--out", out_dir)
    assert result.returncode == 2
    assert "on CPU devices the search needs --memory-limit" in result.stderr


@pytest.mark.slow
def test_tensorflow_confirms_the_answer_and_the_smallest_oom_under_its_allocator_cap(out_dir):
    # TensorFlow caps its own BFC allocator, whose peak near the cap varies from run to run (a
    # batch fits in one run and not in the next), and grows over a confirmation's steps (a batch
    # that fits a trial's one step may not fit four): whatever each run does, the answer must
    # have passed its confirmations and the smallest OOM run out of memory on its last run.
    # The edge lies near 235 (1.2 MB a sample; 192 peaked at 216 MB under the cap's 268 MB in
    # one confirmation and 243 MB in the next, which left it unsettled): a step of 64 from 128
    # brackets it, with 128 to fall back on.
    # tests/test_batchsearch.py drives a confirmation that fails near the edge.
    result = scaling_cli("maxbatch", "--framework", "tensorflow", "--launcher", "tf-mirrored",
                         "--workload", "cifar10", "--image-size", 32, "--device-type", "cpu",
                         "--memory-limit", "256MiB", "--timeout", 300, "--steps", 1,
                         "--warmup", 0, "--min", 128, "--max", 256, "--multiple-of", 64,
                         "--confirm-steps", TF_CONFIRM[0], "--confirm-warmup", TF_CONFIRM[1],
                         "--out", out_dir)
    assert result.returncode == 0, result.stderr
    assert_confirmed(out_dir, read_maxbatch(out_dir)[1], 64, TF_CONFIRM)
    oom_records = [r for r in read_records(out_dir) if r["status"] == "oom"]
    assert all(r["oom_evidence"].startswith("framework error: ResourceExhaustedError")
               for r in oom_records)


@pytest.mark.slow
def test_resnet50_at_the_edge_of_a_2gib_cap_finds_its_answer(out_dir):
    # Near the cap a step fails inside oneDNN ("could not execute a primitive") or the allocator
    # just after an allocation failed: that is running out of memory, on the evidence of the
    # failed allocation, the peak at the cap or the framework's own words, never a crash. One
    # thread, so that every allocation fails in the thread that reports it (with two, oneDNN's
    # can fail in a pool thread whose errno the rank never sees, and the trial stays an error).
    # The edge moves with the code, so the bracket spans it and leaves out the confirmation runs:
    # it lay between 116 and 120 (116 peaked at 2,132 MB under the cap's 2,147 MB, 6.9 MB a
    # sample), which 108 to 124 brackets in four trials, with 70 MB to spare at 108 and 124
    # some 40 MB over.
    make_trial = trial_factory(framework="torch", launcher="torchrun", workload="resnet50",
                               image_size=64, steps=1, warmup=1, device_type="cpu",
                               threads_per_device=1, memory_limit=parse_bytes("2GiB"),
                               timeout_s=600)
    [found] = find_max_batches(make_trial, [1], 4, 108, 124, TrialRunner(out_dir),
                               confirm=False)
    assert found.status == "ok"
    assert 108 <= found.max_batch < 124 and found.min_oom_batch == found.max_batch + 4
    runs = runs_by_batch(out_dir)
    assert runs[found.max_batch] == ["ok"] and runs[found.min_oom_batch] == ["oom"]
    assert set(sum(runs.values(), [])) == {"ok", "oom"}
    records = read_records(out_dir)
    assert all(r["capped_memory_peak_bytes"] < parse_bytes("2GiB")
               for r in records if r["status"] == "ok")
    for edge in (r for r in records if r["status"] == "oom"):
        assert edge["oom_evidence"].startswith(
            ("an allocation failed (ENOMEM) under the 2 GiB cap", "peak ",
             "framework error")), edge
