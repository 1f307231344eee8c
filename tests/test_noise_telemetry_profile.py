"""A cell measured while another process is busy says so, `--wait-for-quiet` waits for it to
end, telemetry covers the timed window only, and `--profile` says where the step time goes."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import rank_reports, read_records, scaling_cli, scaling_cli_ok

from scaling.execute.monitor import SAMPLE_S, TELEMETRY_FILE, CellMonitor, Nvml, summarize_watch
from scaling.workers.breakdown import COMMUNICATION, step_breakdown

CELL = ("run", "--workload", "cifar10", "--image-size", "16", "--batch-size", "4",
        "--warmup", "1", "--steps", "10")


@contextlib.contextmanager
def busy_process(seconds: float = 3600):
    """Another process keeping one core busy for ``seconds``."""
    spinner = subprocess.Popen([sys.executable, "-c",
                                f"import time\nend = time.time() + {seconds}\n"
                                "while time.time() < end: pass"])
    try:
        yield spinner
    finally:
        spinner.kill()
        spinner.wait()


def run_one(out_dir, *args) -> dict:
    scaling_cli_ok(*CELL, "--out", out_dir, *args)
    [record] = read_records(out_dir)
    assert record["status"] == "ok", record["error"]
    return record


def test_a_busy_process_during_the_window_makes_the_cell_noisy(tmp_path):
    with busy_process():
        busy = run_one(tmp_path / "busy", "--min-time", 2)
    quiet = run_one(tmp_path / "quiet", "--min-time", 2)
    assert busy["noisy"] is True
    assert "cores of" in busy["noise"] and "during the window" in busy["noise"]
    assert busy["noise_cores"] > 0.6
    assert busy["noise_cores"] > quiet["noise_cores"] + 0.5


def test_wait_for_quiet_waits_until_the_busy_process_ends(out_dir):
    with busy_process(seconds=3):
        record = run_one(out_dir, "--wait-for-quiet", 30)
    assert 1.5 <= record["quiet_wait_s"] < 30


def test_wait_for_quiet_gives_up_after_its_limit_and_says_so(out_dir):
    with busy_process():
        record = run_one(out_dir, "--wait-for-quiet", 1)
    assert 1 <= record["quiet_wait_s"] < 5
    assert record["noisy"] is True
    assert "before the cell after waiting 1 s for quiet" in record["noise"]


def test_telemetry_summarizes_the_window_of_every_rank(out_dir):
    record = run_one(out_dir, "--devices", 2, "--min-time", 2)
    telemetry = record["telemetry"]
    assert telemetry["samples"] >= 3
    assert 0 < telemetry["cpu_util_mean"] <= 100
    assert len(telemetry["rss_max_bytes_per_rank"]) == 2
    assert all(rss > 50 * 2**20 for rss in telemetry["rss_max_bytes_per_rank"])
    assert "gpu_util_mean" not in telemetry and "energy_j" not in telemetry
    reports = rank_reports(record)
    start, end = min(r["start"] for r in reports), max(r["end"] for r in reports)
    series = [json.loads(line) for line in
              (out_dir / "cells" / record["cell"] / TELEMETRY_FILE).read_text().splitlines()]
    assert len(series) == telemetry["samples"]
    for point in series:
        assert start < point["t"] < end + SAMPLE_S + 0.1
        assert set(point["rss_bytes"]) == {"0", "1"}


def test_no_telemetry_samples_nothing_but_still_looks_before_the_cell(out_dir):
    with busy_process():
        record = run_one(out_dir, "--no-telemetry", "--min-time", 1.5)
    assert record["telemetry"] is None and record["noise_cores"] is None
    assert not (out_dir / "cells" / record["cell"] / TELEMETRY_FILE).exists()
    assert record["noisy"] is True and "before the cell" in record["noise"]


def test_a_bad_wait_is_a_one_line_error(out_dir):
    result = scaling_cli(*CELL, "--out", out_dir, "--wait-for-quiet=soon")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == \
        "Error: Invalid value for '--wait-for-quiet': 'soon' is not a valid float."


@pytest.mark.parametrize("framework, launcher", [
    ("torch", "torchrun"), ("mxnet", "mxnet-kvstore"), ("tensorflow", "tf-mirrored"),
    ("tensorflow", "tf-multiworker"),
])
def test_profile_splits_the_step_into_compute_communication_and_idle(
        out_dir, framework, launcher):
    record = run_one(out_dir, "--framework", framework, "--launcher", launcher, "--devices", 2,
                     "--profile")
    assert record["profile"] is True and record["steps_timed"] == 10
    breakdown = record["step_breakdown"]
    assert set(breakdown) == {"compute", "communication", "idle"}
    assert sum(breakdown.values()) == pytest.approx(1.0)
    assert breakdown["compute"] > 0.2
    # torch's gloo allreduce runs beside the backward pass, so none of it may be exposed.
    assert breakdown["communication"] > 0 or framework == "torch"
    traced = [report for report in rank_reports(record) if report.get("trace")]
    assert traced and traced[0]["rank"] == 0
    for report in traced:
        trace = json.loads(Path(report["trace"]).read_text())
        assert any(COMMUNICATION.search(event.get("name", ""))
                   for event in trace["traceEvents"])
        assert report["step_breakdown"]


def test_breakdown_counts_only_communication_that_compute_does_not_hide():
    events = [
        {"name": "aten::conv2d", "ts": 0, "dur": 40, "cat": "cpu_op", "ph": "X"},
        {"name": "gloo:all_reduce", "ts": 30, "dur": 30, "cat": "cpu_op", "ph": "X"},
        {"name": "aten::add_", "ts": 80, "dur": 20, "cat": "cpu_op", "ph": "X"},
    ]
    # span 100: compute 60, communication 60-40 = 20 not hidden, idle 60..80 = 20
    assert step_breakdown(events, on_device=False) == pytest.approx(
        {"compute": 0.6, "communication": 0.2, "idle": 0.2})


class FakeNvml:
    """MOCK of the NVIDIA management library (nvidia-ml-py), standing in for a GPU driver that
    cannot exist on a machine without NVIDIA GPUs. Two devices at fixed readings; device 1 runs
    a process (pid 4242) that is not the cell's."""

    NVMLError = RuntimeError
    NVML_TEMPERATURE_GPU, NVML_CLOCK_SM = 0, 1

    class _Value:
        def __init__(self, **fields):
            self.__dict__.update(fields)

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetUtilizationRates(self, handle):
        return self._Value(gpu=[90, 70][handle])

    def nvmlDeviceGetMemoryInfo(self, handle):
        return self._Value(used=[30, 20][handle] * 2**30)

    def nvmlDeviceGetPowerUsage(self, handle):
        return [300_000, 250_000][handle]

    def nvmlDeviceGetTemperature(self, handle, sensor):
        return [60, 65][handle]

    def nvmlDeviceGetClockInfo(self, handle, clock):
        return 1980

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return [self._Value(pid=4242)] if handle == 1 else []


def test_gpu_telemetry_and_foreign_gpu_processes_with_a_mocked_nvml(tmp_path):
    monitor = CellMonitor([], telemetry=True)
    monitor.nvml = Nvml(FakeNvml(), [0, 1])
    monitor.samples = [monitor.sample([])]
    time.sleep(0.2)
    monitor.samples.append(monitor.sample([]))
    start, end = monitor.samples[0]["t"], monitor.samples[1]["t"]
    watched = summarize_watch(monitor, (start, end), 0.0, None, tmp_path)
    telemetry = watched["telemetry"]
    assert telemetry["gpu_util_mean"] == 80
    assert telemetry["gpu_memory_max_bytes"] == 30 * 2**30
    assert telemetry["power_mean_w"] == 550
    assert telemetry["energy_j"] == pytest.approx(550 * (end - start))
    assert telemetry["temperature_max_c"] == 65 and telemetry["sm_clock_mean_mhz"] == 1980
    assert watched["noisy"] is True
    assert "processes [4242] that are not the cell's ran on its GPUs" in watched["noise"]
