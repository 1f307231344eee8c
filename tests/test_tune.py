"""``scaling tune``: a search within a budget whose trials are cell records, that survives a
failing trial and a kill, and answers with the best configuration, its ablation, a sweep file
and a report section."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter

import pytest
import yaml
from conftest import read_records, scaling_cli
from cpugroup import AHEAD_SHARES, cpu_group
from slurmcluster import SlurmCluster, missing_binaries

from scaling.execute.store import ResultStore
from scaling.launchers import LAUNCHERS, default_python
from scaling.sweep import expand, load_sweep
from scaling.tune.search import Budget, Candidate, Tuner, ablated, below
from scaling.tune.space import DEFAULT, Config, default_space, load_space

HUGE_BATCH = 1048576
"""An MNIST batch of 3 GiB of pixels: out of memory under a 1 GiB cap."""
BUDGET_S = 75


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """A tiny tune (the default batch, and one that runs out of memory), killed once its first
    trial is recorded and then resumed to its end."""
    folder = tmp_path_factory.mktemp("tune")
    space = folder / "space.yaml"
    space.write_text(yaml.safe_dump({"launchers": ["single"], "batch_sizes": [16, HUGE_BATCH],
                                     "options": {"amp": [DEFAULT],
                                                 "channels_last": [DEFAULT]}}))
    out = folder / "out"
    argv = [sys.executable, "-m", "scaling", "tune", "--workload", "mnist_mlp", "--devices",
            "1", "--device-type", "cpu", "--memory-limit", "1GiB", "--budget", f"{BUDGET_S}s",
            "--space", str(space), "--out", str(out)]
    killed = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not (out / "results.jsonl").exists() or not ResultStore(out).records():
        assert killed.poll() is None, "the tune ended before it could be killed"
        time.sleep(0.2)
    killed.kill()
    killed.wait()
    before = read_records(out)
    resumed = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=600)
    return {"out": out, "before": before, "resumed": resumed,
            "summary": json.loads((out / "tune.json").read_text())}


@pytest.mark.slow
def test_a_killed_tune_resumes_without_repeating_a_trial(tuned):
    assert tuned["resumed"].returncode == 0, tuned["resumed"].stderr
    records = read_records(tuned["out"])
    assert set(Counter(record["cell"] for record in records).values()) == {1}
    [first] = tuned["before"]
    trials = tuned["summary"]["trials"]
    assert trials[0]["cell"] == first["cell"]
    assert [trial["cell"] for trial in trials] == [record["cell"] for record in records]
    assert all(record["purpose"] == "tune" for record in records)


@pytest.mark.slow
def test_a_trial_out_of_memory_is_recorded_and_the_search_goes_on(tuned):
    records = read_records(tuned["out"])
    [huge] = [index for index, record in enumerate(records)
              if record["batch_size"] == HUGE_BATCH]
    assert records[huge]["status"] == "oom"
    assert any(record["status"] == "ok" for record in records[huge + 1:])
    [(config, why)] = tuned["summary"]["dropped"].items()
    assert config == f"torch/single batch {HUGE_BATCH}" and why.startswith("trial oom")


@pytest.mark.slow
def test_a_tiny_budget_tune_ends_within_it_and_answers(tuned):
    summary, out = tuned["summary"], tuned["out"]
    assert summary["elapsed_s"] <= 1.1 * BUDGET_S
    assert summary["best"]["config"] == summary["default"]["config"] == "torch/single batch 16"
    assert summary["best"]["figures"] >= 2 and summary["best"]["ci95"]
    assert summary["verdict"] == ("the default configuration is the fastest found: no knob "
                                  "mattered here")
    assert summary["ablation"] == [] and summary["leader_path"][0]["trial"] == 1
    assert "best: torch/single batch 16: " in tuned["resumed"].stdout
    [cell] = [cell for cell in expand(load_sweep(out / "best.yaml"))
              if cell.launcher == "single" and cell.repeat == 0]
    assert (cell.framework, cell.workload, cell.batch_size, cell.devices, cell.options) == (
        "torch", "mnist_mlp", 16, 1, {})
    page = (out / "report.html").read_text()
    assert '<section id="tuning">' in page and "<svg" in page.split('id="tuning"')[1]
    assert f"torch/single batch {HUGE_BATCH}: trial oom" in page


@pytest.mark.slow
def test_a_batch_far_faster_than_the_default_wins_and_the_ablation_credits_it(tmp_path):
    """One thread per device, in a CPU group ahead of the neighbouring tests' processes: with
    two threads, or beside a neighbour's burst, these millisecond steps slow tenfold at times
    (each step's threads wait for each other), and the best's interval then reaches down to
    the default's."""
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({"launchers": ["single"], "batch_sizes": [1, 64],
                                     "options": {"amp": [DEFAULT],
                                                 "channels_last": [DEFAULT]}}))
    out = tmp_path / "out"
    with cpu_group(f"scaling-tune-{os.getpid()}-{tmp_path.name}", shares=AHEAD_SHARES) as group:
        ran = scaling_cli("tune", "--workload", "mnist_mlp", "--devices", 1, "--device-type",
                          "cpu", "--threads-per-device", 1, "--budget", "60s", "--space", space,
                          "--out", out, timeout=600, cpu_group=group)
    assert ran.returncode == 0, ran.stderr
    summary = json.loads((out / "tune.json").read_text())
    assert summary["elapsed_s"] <= 1.1 * 60
    assert summary["best"]["config"] == "torch/single batch 64"
    assert summary["default"]["config"] == "torch/single batch 1"
    assert summary["verdict"].startswith("the best is ahead of the default by +")
    [row] = summary["ablation"]
    assert (row["knob"], row["best"], row["default"], row["effect"]) == (
        "batch_size", 64, 1, "helps")
    assert row["contribution_ci95"][0] > 0
    assert "ablation of torch/single batch 64:\n  batch_size=64 (default 1): +" in ran.stdout
    assert yaml.safe_load((out / "best.yaml").read_text())["batch_sizes"] == [64]


@pytest.mark.slow
def test_under_slurm_each_trial_is_a_job_recorded_like_any_cell(tmp_path):
    if missing_binaries():
        pytest.skip(f"Slurm is not installed ({', '.join(missing_binaries())} missing)")
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({"launchers": ["single"], "batch_sizes": [16],
                                     "options": {"amp": [DEFAULT, True],
                                                 "channels_last": [DEFAULT]}}))
    out = tmp_path / "out"
    with SlurmCluster(tmp_path / "cluster") as cluster:
        ran = subprocess.run(
            [sys.executable, "-m", "scaling", "tune", "--workload", "mnist_mlp", "--devices",
             "1", "--device-type", "cpu", "--budget", "90s", "--space", str(space), "--out",
             str(out), "--backend", "slurm"],
            capture_output=True, text=True, env=cluster.env, timeout=600)
    assert ran.returncode == 0, ran.stderr
    records = read_records(out)
    assert len(records) >= 2 and all(record["slurm"]["job_id"] for record in records)
    assert len({record["slurm"]["job_id"] for record in records}) == len(records)
    summary = json.loads((out / "tune.json").read_text())
    assert [trial["cell"] for trial in summary["trials"]] == [r["cell"] for r in records]
    assert summary["best"]["config"] in {"torch/single batch 16",
                                         "torch/single batch 16 amp=true"}


def figures(*values, half_width=1.0):
    """Records of ok trials with these images/sec, each with its window's interval."""
    return [{"status": "ok", "images_per_sec": value,
             "images_per_sec_ci95": [value - half_width, value + half_width]}
            for value in values]


def test_a_candidate_leaves_the_race_only_on_two_figures_below_the_leader():
    config = Config("torch", "torchrun", 16)
    leader = Candidate(config, figures(100.0, 101.0))
    assert not below(Candidate(config, figures(50.0)), leader)  # one figure is not enough
    assert below(Candidate(config, figures(50.0, 52.0)), leader)
    assert not below(Candidate(config, figures(90.0, 99.5)), leader)  # the intervals overlap


def test_the_search_drops_what_lies_below_the_leader_and_keeps_what_overlaps_it():
    tuner = Tuner(default_space(["torch"], ["single"], 1, "cpu", [16, 32, 64]), None, None, {},
                  Budget(60))
    for batch, values in ((16, (100.0, 101.0)), (32, (50.0, 52.0)), (64, (97.0, 100.0))):
        tuner.candidate(Config("torch", "single", batch)).records = figures(*values)
    tuner.candidate(Config("torch", "single", 8)).records = figures(10.0)
    tuner.drop_separated()
    assert {config.batch_size: found.dropped for config, found in tuner.candidates.items()} == {
        16: "", 32: "below the leader: 51.0 img/s against 100.5 [99.1, 101.9]", 64: "", 8: ""}


def test_the_ablation_puts_each_knob_of_the_best_back_at_its_default():
    default = Config("torch", "torchrun", 16)
    best = Config("torch", "horovod", 32, (("amp", True), ("fusion_threshold_mb", 32)))
    assert [(knob, config.label()) for knob, config in ablated(best, default)] == [
        ("launcher", "torch/torchrun batch 32 amp=true"),
        ("batch_size", "torch/horovod batch 16 amp=true fusion_threshold_mb=32"),
        ("amp", "torch/horovod batch 32 fusion_threshold_mb=32"),
        ("fusion_threshold_mb", "torch/horovod batch 32 amp=true")]


def test_the_default_cpu_space_leaves_out_what_needs_a_gpu_or_minutes():
    space = default_space(["torch", "tensorflow", "mxnet", "jax"], None, 2, "cpu")
    horovod = LAUNCHERS.get("horovod").missing("torch", default_python("torch", "horovod"))
    assert space.launchers["torch"] == (["torchrun"] if horovod else ["horovod", "torchrun"])
    assert space.left_out.get("torch/horovod") == horovod
    assert space.default() == Config("torch", "torchrun", 16)
    assert space.options["bucket_cap_mb"] == [DEFAULT, 5, 100]
    assert space.options["comm_hook"] == [DEFAULT, "fp16", "bf16"]
    assert space.options["amp"] == [DEFAULT, True, "fp16", "bf16"]
    assert space.options["broadcast_buffers"] == [DEFAULT, False]
    assert "nccl" not in space.options["cross_device_ops"] + space.options["kvstore"]
    assert not {"all_reduce_combine_mb", "compile", "cudnn_benchmark"} & set(space.options)


def test_a_space_file_of_other_frameworks_searches_their_own_knobs(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text("frameworks: [tensorflow]\nbatch_sizes: [8]\n")
    space = load_space(path, lambda names: default_space(names or ["torch"], None, 2, "cpu"),
                       False, False)
    assert (space.frameworks, space.batch_sizes) == (["tensorflow"], [8])
    assert space.default() == Config("tensorflow", "tf-mirrored", 8)
    assert {"xla", "mixed_precision", "cross_device_ops", "pack_mb"} <= set(space.options)
    assert "bucket_cap_mb" not in space.options

