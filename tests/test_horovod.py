"""Horovod for PyTorch, TensorFlow and MXNet under real horovodrun (one node) and the harness's
spawner with Horovod's gloo rendezvous (several nodes), at tiny sizes.

The Horovod builds come from ``make horovod-env`` (``make test`` runs it): torch in the main
environment, TensorFlow 2.15.1 in ``.venv-tf215``, MXNet in ``.venv-mxnet``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import (check_images_per_sec, leftover_cell_processes, rank_reports,
                      read_records, scaling_cli, scaling_cli_ok, write_sweep)
from scaling.cell import make_cell
from scaling.execute.monitor import TELEMETRY_FILE
from scaling.placement import free_port_block
from scaling.sweep import expand, interpreters, load_sweep

NATIVE = {"torch": "torchrun", "tensorflow": "tf-mirrored", "mxnet": "mxnet-kvstore"}
TINY = ("--workload", "cifar10", "--batch-size", 4, "--image-size", 16, "--steps", 5,
        "--warmup", 1, "--device-type", "cpu")


def run_horovod(out_dir, *args, framework="torch", devices=2, env=None):
    return scaling_cli("run", "--framework", framework, "--launcher", "horovod",
                       "--devices", devices, *TINY, *args, "--out", out_dir, env=env)


@pytest.mark.slow
def test_each_framework_runs_on_one_and_two_ranks_with_the_same_model_as_its_own_launcher(
        tmp_path, out_dir):
    # Two sweeps into one folder: each framework's own launcher at one device (the model to
    # compare with), then Horovod at one and two ranks.
    natives = write_sweep(tmp_path / "native.yaml", devices=[1], references="none", frameworks={
        framework: {"launchers": [native]} for framework, native in NATIVE.items()})
    horovod = write_sweep(tmp_path / "hvd.yaml", devices=[1, 2], references="none", frameworks={
        framework: {"launchers": ["horovod"]} for framework in NATIVE})
    scaling_cli_ok("sweep", natives, "--out", out_dir)
    scaling_cli_ok("sweep", horovod, "--out", out_dir, "--resume")
    records = read_records(out_dir)
    assert sorted((r["framework"], r["launcher"], r["devices"], r["status"]) for r in records) \
        == sorted([(framework, native, 1, "ok") for framework, native in NATIVE.items()]
                  + [(framework, "horovod", devices, "ok") for framework in NATIVE
                     for devices in (1, 2)])
    params = defaultdict(set)
    for record in records:
        params[record["framework"]].add(record["params"])
        if record["launcher"] == "horovod":
            assert record["data_parallel"] == "horovod"
            assert record["versions"]["horovod"] == "0.28.1"
            reports = rank_reports(record)
            assert sorted(r["rank"] for r in reports) == list(range(record["devices"]))
            check_images_per_sec(record, 4 * record["devices"] * 3)
    assert all(len(counts) == 1 for counts in params.values()), params

    by_launcher = {(r["framework"], r["launcher"]): r for r in records}
    assert by_launcher["tensorflow", "horovod"]["versions"]["tensorflow"] == "2.15.1"
    native_tf = by_launcher["tensorflow", "tf-mirrored"]["versions"]["tensorflow"]
    assert native_tf != "2.15.1"
    report = scaling_cli_ok("report", out_dir).stdout
    assert "tensorflow 2.15.1 / horovod" in report
    assert f"tensorflow {native_tf} / tf-mirrored" in report


def test_the_comparison_config_pairs_each_framework_with_horovod_on_one_interpreter():
    spec = load_sweep(Path(__file__).resolve().parents[1] / "configs" / "horovod-vs-native.yaml")
    assert interpreters(spec) == {"tensorflow@tf215": ".venv-tf215/bin/python"}
    cells = expand(dataclasses.replace(spec, devices=[1, 2]))
    assert {(c.environment, c.launcher, c.data_parallel) for c in cells} == {
        ("torch", "torchrun", "ddp"), ("torch", "horovod", "horovod"),
        ("tensorflow@tf215", "tf-multiworker", "multiworker"),
        ("tensorflow@tf215", "horovod", "horovod"),
        ("mxnet", "mxnet-kvstore", "kvstore"), ("mxnet", "horovod", "horovod"),
        ("torch", "single", "none"), ("tensorflow@tf215", "single", "none"),
        ("mxnet", "single", "none")}


@pytest.fixture(scope="module")
def profiled_cell(tmp_path_factory):
    """One cell over two ranks with a window of 3 s at least, profiled after it, and with
    Horovod's timeline on, for the tests that read it: the command's result and the record."""
    out_dir = tmp_path_factory.mktemp("profiled") / "out"
    result = run_horovod(out_dir, "--min-time", 3, "--profile", "--option", "timeline=true")
    return result, read_records(out_dir)


@pytest.mark.slow
def test_telemetry_knows_each_horovod_rank_and_the_profile_sees_the_wait_for_gradients(
        profiled_cell):
    result, records = profiled_cell
    assert result.returncode == 0, result.stderr
    [record] = records
    # The trace cannot see gloo's allreduce in Horovod's background thread; the wait for it
    # in synchronize is timed.
    assert record["step_breakdown"]["communication"] > 0
    assert len(record["telemetry"]["rss_max_bytes_per_rank"]) == 2
    series = (Path(record["log"]).parent / TELEMETRY_FILE).read_text().splitlines()
    assert {rank for line in series for rank in json.loads(line)["rss_bytes"]} == {"0", "1"}


@pytest.mark.slow
def test_a_rank_that_dies_is_recorded_as_crashed(out_dir):
    result = run_horovod(out_dir, env={**os.environ, "SCALING_FAULT": "crash@1:3"})
    assert result.returncode == 1
    [record] = read_records(out_dir)
    assert (record["status"], record["error"]) == ("crashed", "rank 1 killed by SIGKILL")
    assert leftover_cell_processes(record) == []


@pytest.mark.slow
def test_a_rank_that_hangs_is_killed_at_the_timeout_with_horovods_output_kept(out_dir):
    env = {**os.environ, "SCALING_FAULT": "hang@1:3", "HOROVOD_LOG_LEVEL": "info"}
    result = run_horovod(out_dir, "--timeout", 30, env=env)
    assert result.returncode == 1
    [record] = read_records(out_dir)
    assert record["status"] == "timeout" and "no result within 30 s" in record["error"]
    assert leftover_cell_processes(record) == []
    log = Path(record["log"]).read_text()
    assert "[0]: Horovod initialized" in log and "[1]: Horovod initialized" in log


@pytest.mark.slow
def test_a_rank_out_of_memory_is_recorded_as_oom(out_dir):
    result = run_horovod(out_dir, "--memory-limit", "1GiB", "--batch-size", 1024,
                         "--image-size", 32)
    assert result.returncode == 1
    [record] = read_records(out_dir)
    assert record["status"] == "oom" and "can't allocate memory" in record["error"]


@pytest.mark.slow
def test_channels_last_is_refused_with_its_reason(out_dir):
    # NHWC convolution weights have non-contiguous gradients, which Horovod cannot allreduce.
    result = run_horovod(out_dir, "--option", "channels_last=true")
    assert result.returncode == 1
    [record] = read_records(out_dir)
    assert record["status"] == "error"
    assert "Horovod allreduces contiguous tensors only" in record["error"]


@pytest.mark.slow
def test_tensorflow_under_horovod_runs_mixed_precision_and_refuses_xla_with_its_reason(tmp_path):
    # Float16 runs slowly on CPU: one step after the warm-up shows the loss scaled and the
    # gradients allreduced; a one-cell sweep, which times no references after it.
    sweep = write_sweep(tmp_path / "mixed.yaml", devices=[2], steps=1, references="none",
                        timeout_s=600, frameworks={"tensorflow": {
                            "launchers": ["horovod"], "options": {"mixed_precision": True}}})
    mixed = scaling_cli("sweep", sweep, "--out", tmp_path / "mixed")
    assert mixed.returncode == 0, mixed.stderr
    [record] = read_records(tmp_path / "mixed")
    assert record["options"] == {"mixed_precision": True} and record["devices"] == 2
    assert record["status"] == "ok" and record["steps_timed"] == 1
    assert record["versions"]["keras"].startswith("2.")  # Keras 2 scales the loss by hand
    # Every rank refuses xla as it builds its strategy: one rank shows the refusal.
    xla = run_horovod(tmp_path / "xla", "--option", "xla=true", framework="tensorflow",
                      devices=1)
    assert xla.returncode == 1
    [record] = read_records(tmp_path / "xla")
    assert record["status"] == "error" and "xla does not run under Horovod" in record["error"]


@pytest.mark.slow
def test_timeline_option_writes_horovods_timeline_into_the_cell_folder(profiled_cell):
    result, records = profiled_cell
    assert result.returncode == 0, result.stderr
    [record] = records
    assert record["options"] == {"timeline": True}
    events = json.loads((Path(record["log"]).parent / "horovod-timeline.json").read_text())
    assert {"NEGOTIATE_ALLREDUCE", "GLOO_ALLREDUCE"} <= {event.get("name") for event in events}


def test_a_framework_without_its_horovod_build_is_an_env_error_naming_the_make_target(out_dir):
    # The main environment has TensorFlow 2.21 and a Horovod built for torch only.
    result = run_horovod(out_dir, "--python", sys.executable, framework="tensorflow")
    assert result.returncode == 3
    [record] = read_records(out_dir)
    assert record["status"] == "env_error"
    assert record["error"] == (f"Horovod is not built for tensorflow under {sys.executable}; "
                               "build it with: make horovod-env")


@pytest.mark.slow
def test_two_nodes_meet_at_node_zeros_gloo_rendezvous_and_make_one_record(out_dir):
    port = free_port_block(1)
    nodes = [subprocess.Popen(
        [sys.executable, "-m", "scaling", "run", "--framework", "torch", "--launcher", "horovod",
         "--devices", "1", "--threads-per-device", "1", *map(str, TINY), "--nodes", "2",
         "--node-rank", str(rank), "--rendezvous", f"127.0.0.1:{port}",
         "--hosts", "127.0.0.1,127.0.0.2", "--timeout", "180", "--out", str(out_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    outputs = [node.communicate(timeout=300) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs
    [record] = read_records(out_dir)
    assert record["status"] == "ok", record["error"]
    assert sorted(r["rank"] for r in rank_reports(record)) == [0, 1]
    assert record["timed_images"] == 4 * 2 * record["steps_timed"]


@pytest.mark.slow
def test_two_fusion_thresholds_are_two_cells_each_naming_its_own(tmp_path, out_dir):
    """The same cell swept under two values of HOROVOD_FUSION_THRESHOLD: ``--resume`` runs the
    second as a cell of its own and skips a repeat of the first, and every rank ran with its
    cell's value. Under a minimum time, the ranks agree on the window's steps through Horovod's
    allreduce, outside the window."""
    sweep = write_sweep(tmp_path / "fusion.yaml", devices=[2], min_time_s=0.5,
                        references="none", frameworks={"torch": {"launchers": ["horovod"]}})
    for threshold in ("0", "1048576", "0"):
        scaling_cli_ok("sweep", sweep, "--out", out_dir, "--resume",
                       env={**os.environ, "HOROVOD_FUSION_THRESHOLD": threshold})
    records = read_records(out_dir)
    assert sorted(r["collective_env"]["HOROVOD_FUSION_THRESHOLD"] for r in records) == \
        ["0", "1048576"]
    assert len({record["cell"] for record in records}) == 2
    for record in records:
        assert record["status"] == "ok", record["error"]
        for report in rank_reports(record):
            assert report["collective_env"]["HOROVOD_FUSION_THRESHOLD"] == \
                record["collective_env"]["HOROVOD_FUSION_THRESHOLD"]
            assert report["window_collectives"] == 0


@pytest.mark.slow
def test_horovod_knobs_win_over_the_exported_variables_and_are_in_effect_in_every_rank(
        tmp_path):
    knobs = {"fusion_threshold_mb": 2, "cycle_time_ms": 2.5, "compression": "fp16"}
    env = {**os.environ, "HOROVOD_FUSION_THRESHOLD": "999", "HOROVOD_CYCLE_TIME": "7"}
    result = run_horovod(tmp_path / "torch", "--threads-per-device", 1, "--steps", 3,
                         *[arg for key, value in knobs.items()
                           for arg in ("--option", f"{key}={value}")], env=env)
    assert result.returncode == 0, result.stderr
    [record] = read_records(tmp_path / "torch")
    assert record["status"] == "ok", record["error"]
    assert record["options"] == knobs
    ran = {"HOROVOD_FUSION_THRESHOLD": str(2 * 2**20), "HOROVOD_CYCLE_TIME": "2.5"}
    assert {key: record["collective_env"][key] for key in ran} == ran
    cell = dict(framework="torch", launcher="horovod", workload="cifar10", devices=2,
                batch_size=4, image_size=16, steps=3, warmup=1, device_type="cpu",
                threads_per_device=1, collective_env={})
    assert make_cell(**cell, options=knobs).cell_id != make_cell(**cell).cell_id
    for report in rank_reports(record):
        assert report["communication_in_effect"] == {
            "fusion_threshold_mb": 2.0, "cycle_time_ms": 2.5, "compression": "FP16Compressor"}

    result = run_horovod(tmp_path / "mxnet", "--threads-per-device", 1, "--steps", 3,
                         "--option", "compression=fp16", framework="mxnet")
    assert result.returncode == 0, result.stderr
    [record] = read_records(tmp_path / "mxnet")
    assert record["status"] == "ok", record["error"]
    for report in rank_reports(record):
        assert report["communication_in_effect"] == {
            "fusion_threshold_mb": 128.0, "cycle_time_ms": 1.0, "compression": "FP16Compressor"}
