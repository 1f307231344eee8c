"""A cell measured while another process is busy before or during its window says so, and its
own processes (their reaped children too) are never that noise; `--wait-for-quiet` looks again
while the machine is busy; telemetry covers the window only; `--profile` traces real cells.

The busy process is real, and every test that needs it waits until the harness's own look at
the machine sees it. What is checked is what the harness recorded, never how long it took."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from conftest import rank_reports, read_records, scaling_cli_ok, scaling_in_process, wait_until

from scaling.execute.monitor import (BEFORE_CHECK_S, NOISE_CORES, QUIET_CHECK_S, SAMPLE_S,
                                     TELEMETRY_FILE, CellMonitor, Nvml, WatchSettings,
                                     cores_before, look_before, other_cores, summarize_watch,
                                     wait_for_quiet)
from scaling.execute.run import images_per_joule
from scaling.workers.breakdown import COMMUNICATION
from scaling.workers.common import process_ranks

CELL = ("run", "--workload", "cifar10", "--image-size", "16", "--batch-size", "4",
        "--warmup", "1", "--steps", "2")
WINDOW = ("--min-time", 4 * SAMPLE_S)
"""A timed window of at least four sampling periods, so that samples fall inside it."""
WAITING = "waiting for quiet"
"""What the harness says each time it looks at the machine again because it was busy."""


@contextlib.contextmanager
def busy_process():
    """Another process keeping one core busy until the block ends; the block starts once the
    process spins and the harness's look at the machine sees other processes busy."""
    spinner = subprocess.Popen([sys.executable, "-c", "print('spinning', flush=True)\n"
                                                      "while True: pass"],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert spinner.stdout.readline() == "spinning\n"
        wait_until(lambda: other_cores() > NOISE_CORES, "busy look at the machine")
        yield spinner
    finally:
        spinner.kill()
        spinner.wait()


def run_one(out_dir, *args) -> dict:
    scaling_cli_ok(*CELL, "--out", out_dir, *args)
    [record] = read_records(out_dir)
    assert record["status"] == "ok", record["error"]
    return record


def series_of(record) -> list:
    path = Path(record["log"]).parent / TELEMETRY_FILE
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def busy_run(tmp_path_factory) -> dict:
    """Two ranks of one thread each, timed for at least four sampling periods while another
    process keeps a core busy: the machine has no core to spare."""
    with busy_process():
        return run_one(tmp_path_factory.mktemp("busy") / "out", "--devices", 2,
                       "--threads-per-device", 1, *WINDOW)


@pytest.mark.slow
def test_a_busy_process_before_and_during_the_window_makes_the_cell_noisy(busy_run):
    cores = psutil.cpu_count()
    assert busy_run["noisy"] is True
    before, during = busy_run["noise"].split("; ")
    assert before.startswith("other processes used ") and \
        before.endswith(f" cores of {cores} before the window")
    assert during == f"other processes used {busy_run['noise_cores']:.2f} cores of {cores} " \
                     "during the window"
    assert busy_run["noise_cores"] > NOISE_CORES


@pytest.mark.slow
def test_the_cells_own_work_is_never_counted_as_noise(busy_run):
    """The machine is saturated, so a cell whose own work were also counted as the others'
    would add up to more cores than there are."""
    series = series_of(busy_run)
    assert sum(point["cell_cores"] for point in series) > 0
    for point in series:
        # Counters tick every 10 ms and are read a few milliseconds apart.
        assert point["cell_cores"] + point["other_cores"] <= psutil.cpu_count() + 0.1


@pytest.mark.slow
def test_telemetry_summarizes_the_window_of_every_rank(busy_run):
    telemetry = busy_run["telemetry"]
    assert 0 < telemetry["cpu_util_mean"] <= 100
    assert len(telemetry["rss_max_bytes_per_rank"]) == 2
    assert all(rss > 50 * 2**20 for rss in telemetry["rss_max_bytes_per_rank"])
    assert "gpu_util_mean" not in telemetry and "energy_j" not in telemetry
    reports = rank_reports(busy_run)
    start, end = min(r["start"] for r in reports), max(r["end"] for r in reports)
    series = series_of(busy_run)
    assert telemetry["samples"] == len(series) >= 3
    assert series[0]["t"] - series[0]["seconds"] <= start
    for before, after in zip(series, series[1:]):
        assert after["t"] - after["seconds"] == pytest.approx(before["t"], abs=1e-6)
    for point in series:
        assert point["t"] >= start and point["t"] - point["seconds"] <= end
        assert set(point["rss_bytes"]) == {"0", "1"} or point["t"] > end


def test_wait_for_quiet_looks_again_while_the_machine_is_busy():
    """The wait goes on, saying so, after each busy look, and ends at the first quiet one. The
    looks are given here: whether a machine shared with others is ever quiet is no test's to
    decide (the command's wait, beside a real busy process, is tested below)."""
    looks, said = iter([1.5, 0.9, 0.1, 2.0]), []
    assert wait_for_quiet(600, said.append, lambda: next(looks))[1] == 0.1
    assert said == [1.5, 0.9]


def test_wait_for_quiet_stops_at_its_limit_whatever_the_looks_say():
    looks, said = iter([1.5, 0.9]), []
    assert wait_for_quiet(0, said.append, lambda: next(looks))[1] == 1.5
    assert said == []


QUIET_LIMIT_S = 2


@pytest.fixture(scope="module")
def gave_up(tmp_path_factory):
    """A cell without telemetry that waits for quiet at most ``QUIET_LIMIT_S`` beside a process
    that stays busy until the cell has ended: its record and what the harness said."""
    out = tmp_path_factory.mktemp("gave-up") / "out"
    with busy_process():
        result = scaling_cli_ok(*CELL, "--out", out, "--no-telemetry",
                                "--wait-for-quiet", QUIET_LIMIT_S)
    [record] = read_records(out)
    assert record["status"] == "ok", record["error"]
    return record, result.stderr


@pytest.mark.slow
def test_wait_for_quiet_gives_up_after_its_limit_and_says_so(gave_up):
    record, said = gave_up
    assert record["quiet_wait_s"] >= QUIET_LIMIT_S
    # Each look lasts at least QUIET_CHECK_S, and the first to end past the limit is the last.
    assert said.count(WAITING) <= QUIET_LIMIT_S / QUIET_CHECK_S - 1
    assert record["noisy"] is True
    assert record["noise"].endswith(
        f"before the cell after waiting {record['quiet_wait_s']:.0f} s for quiet")


@pytest.mark.slow
def test_no_telemetry_samples_nothing_but_still_looks_before_the_cell(gave_up):
    record, _ = gave_up
    assert record["telemetry"] is None and record["noise_cores"] is None
    assert not (Path(record["log"]).parent / TELEMETRY_FILE).exists()
    assert record["noisy"] is True and "before the cell" in record["noise"]
    assert "during the window" not in record["noise"]


def test_a_bad_wait_is_a_one_line_error(out_dir):
    result = scaling_in_process(*CELL, "--out", out_dir, "--wait-for-quiet=soon")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == \
        "Error: Invalid value for '--wait-for-quiet': 'soon' is not a valid float."


@pytest.mark.slow
@pytest.mark.parametrize("framework, launcher", [
    ("torch", "torchrun"), ("mxnet", "mxnet-kvstore"), ("tensorflow", "tf-mirrored"),
    ("tensorflow", "tf-multiworker"),
])
def test_profile_splits_the_step_into_compute_communication_and_idle(
        out_dir, framework, launcher):
    record = run_one(out_dir, "--framework", framework, "--launcher", launcher, "--devices", 2,
                     "--profile")
    assert record["profile"] is True and record["steps_timed"] == 2
    breakdown = record["step_breakdown"]
    parts = ("compute", "communication", "idle")
    assert sum(breakdown[part] for part in parts) == pytest.approx(1.0)
    assert all(0 <= share <= 1 for share in breakdown.values())
    assert breakdown["compute"] > 0
    # Under torch DDP on CPU the trace cannot see gloo's allreduce; the bucket timings show
    # the wait for the last bucket after the backward pass, and nothing says what ran beside
    # the compute. The other frameworks' traces show their collectives, and that share.
    assert breakdown["communication"] > 0
    beside = set() if framework == "torch" else {"communication_beside"}
    assert set(breakdown) == {*parts, *beside}
    traced = [report for report in rank_reports(record) if report.get("trace")]
    assert traced and traced[0]["rank"] == 0
    for report in traced:
        trace = json.loads(Path(report["trace"]).read_text())
        assert any(COMMUNICATION.search(event.get("name", ""))
                   for event in trace["traceEvents"])
        assert report["step_breakdown"]


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

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        raise self.NVMLError("Not Supported")  # as before Volta


class FakeNvmlWithEnergy(FakeNvml):
    """MOCK, as FakeNvml, whose devices also keep NVML's cumulative energy counter
    (millijoules): a recorded series, replayed one reading per call, in which the devices drew
    400 J and 100 J between the first and the last sample, whatever their power said."""

    def __init__(self, series):
        self.series = {handle: iter(readings) for handle, readings in series.items()}

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        return next(self.series[handle])


def test_gpu_telemetry_and_foreign_gpu_processes_with_a_mocked_nvml(tmp_path):
    monitor = CellMonitor([], telemetry=True)
    monitor.nvml = Nvml(FakeNvml(), [0, 1])
    monitor.samples = [monitor.sample([]), monitor.sample([])]
    start, end = monitor.samples[0]["t"], monitor.samples[1]["t"]
    watched = summarize_watch(monitor, (start, end), 0.0, None, tmp_path)
    telemetry = watched["telemetry"]
    assert telemetry["gpu_util_mean"] == 80
    assert telemetry["gpu_memory_max_bytes"] == 30 * 2**30
    assert telemetry["power_mean_w"] == 550
    assert telemetry["energy_j"] == pytest.approx(550 * (end - start))
    assert telemetry["energy_source"] == "mean power x window"  # this mock has no counter
    assert telemetry["temperature_max_c"] == 65 and telemetry["sm_clock_mean_mhz"] == 1980
    assert watched["noisy"] is True
    assert "processes [4242] that are not the cell's ran on its GPUs" in watched["noise"]


@pytest.mark.parametrize("environ, ranks", [
    ({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"}, (3, 1, 4)),  # torchrun, the spawner
    ({"HOROVOD_RANK": "1", "HOROVOD_LOCAL_RANK": "1", "HOROVOD_SIZE": "2"}, (1, 1, 2)),
    ({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
      "OMPI_COMM_WORLD_SIZE": "8"}, (5, 1, 8)),  # horovodrun over Open MPI
    ({"PMI_RANK": "2", "MPI_LOCALRANKID": "0", "PMI_SIZE": "4"}, (2, 0, 4)),  # MPICH, Intel MPI
    ({}, (0, 0, 1)),
], ids=["torchrun", "horovod-gloo", "open-mpi", "mpich", "alone"])
def test_the_monitor_and_the_workers_read_a_rank_from_whichever_launcher_started_it(
        environ, ranks):
    assert process_ranks(environ) == ranks


def test_energy_comes_from_the_devices_counters_where_nvml_gives_them(tmp_path):
    monitor = CellMonitor([], telemetry=True)
    monitor.nvml = Nvml(FakeNvmlWithEnergy({0: [1_000_000, 1_400_000],
                                            1: [5_000_000, 5_100_000]}), [0, 1])
    monitor.samples = [monitor.sample([]), monitor.sample([])]
    start, end = monitor.samples[0]["t"], monitor.samples[1]["t"]
    telemetry = summarize_watch(monitor, (start, end), 0.0, None, tmp_path)["telemetry"]
    assert telemetry["energy_source"] == "energy counter"
    assert telemetry["energy_j"] == pytest.approx(500.0)
    assert telemetry["power_mean_w"] == 550  # the power readings no longer decide the energy
    outcome = {"timed_images": 1000, "telemetry": telemetry}
    assert images_per_joule(outcome, nodes=1) == pytest.approx(2.0)
    assert images_per_joule({"timed_images": 1000, "telemetry": None}, nodes=1) is None


def test_a_process_the_cell_starts_between_two_samples_is_the_cells_not_noise(tmp_path):
    """A loader's workers start as a real-data window ends (its pipeline alone is timed next):
    the interval that holds their start counts their CPU time as the cell's. Here the rank (pid 1)
    used 0.9 s and a worker that did not exist at the first sample (pid 2) 0.8 s of the 1.8 s
    the machine was busy in one second: 0.1 core is another process's."""
    monitor = CellMonitor([], telemetry=True)
    worker = {"rss_bytes": 2**20, "rank": None}
    monitor.samples = [
        {"t": 100.0, "busy_s": 50.0, "own_s": 3.0,
         "processes": {1: {"cpu_s": 5.0, "rss_bytes": 2**30, "rank": 0}}},
        {"t": 101.0, "busy_s": 51.8, "own_s": 3.0,
         "processes": {1: {"cpu_s": 5.9, "rss_bytes": 2**30, "rank": 0},
                       2: {"cpu_s": 0.8, **worker}}},
    ]
    watched = summarize_watch(monitor, (100.0, 101.0), 0.0, None, tmp_path)
    assert watched["noise_cores"] == pytest.approx(0.1)
    assert watched["noisy"] is False


def test_the_samples_before_the_window_say_how_busy_the_machine_was_before_it(tmp_path):
    """Without a look before the cell, the intervals sampled from the tree's start to the
    window's say it, each weighed by its length: here other processes used 1.5 cores over the
    first half second and 0.5 over the next second (the cell's build), and none in the next,
    which ends inside the window and is left out. Over a window the other processes left quiet,
    the cell is noisy for what came before."""
    monitor = CellMonitor([], telemetry=True)

    def sample(t, busy_s, cell_s):
        return {"t": t, "busy_s": busy_s, "own_s": 3.0,
                "processes": {1: {"cpu_s": cell_s, "rss_bytes": 2**30, "rank": 0}}}

    monitor.samples = [sample(100.0, 50.0, 5.0), sample(100.5, 51.0, 5.25),
                       sample(101.5, 52.5, 6.25), sample(102.5, 53.5, 7.25),
                       sample(103.5, 54.5, 8.25)]
    assert cores_before(monitor.samples, 101.6) == pytest.approx((1.5 * 0.5 + 0.5) / 1.5)
    # Where no interval ends before the window starts, the first one tells.
    assert cores_before(monitor.samples, 100.4) == pytest.approx(1.5)
    assert cores_before([], 100.4) is None
    watched = summarize_watch(monitor, (101.6, 103.5), None, None, tmp_path)
    assert watched["noisy"] is True and watched["noise_cores"] == pytest.approx(0.0)
    assert watched["noise"] == f"other processes used 0.83 cores of {psutil.cpu_count()} " \
                               "before the window"
    # A look just before the cell, where there was one, says its own.
    looked = summarize_watch(monitor, (101.6, 103.5), 0.9, None, tmp_path)
    assert looked["noise"] == f"other processes used 0.90 cores of {psutil.cpu_count()} " \
                              f"before the cell; {watched['noise']}"


def test_a_child_that_ended_between_two_samples_is_the_cells_not_noise(tmp_path):
    """A rank (pid 1) ran a compiler (pid 2) while it built: the compiler computed 0.3 s more
    after the first sample, then ended, and the rank reaped it, so the rank's time, which
    counts its reaped children's, grew by its own 0.5 s and the compiler's whole 1.3 s. The
    1.0 s the first sample already counted is taken off: of the 0.9 s the machine was busy,
    0.1 s was another process's."""
    monitor = CellMonitor([], telemetry=True)
    rank = {"parent": 0, "rss_bytes": 2**30, "rank": 0}
    monitor.samples = [
        {"t": 100.0, "busy_s": 50.0, "own_s": 3.0,
         "processes": {1: {"cpu_s": 5.0, **rank},
                       2: {"cpu_s": 1.0, "parent": 1, "rss_bytes": 2**20, "rank": None}}},
        {"t": 101.0, "busy_s": 50.9, "own_s": 3.0, "processes": {1: {"cpu_s": 6.8, **rank}}},
    ]
    watched = summarize_watch(monitor, (100.0, 101.0), None, None, tmp_path)
    assert watched["noise_cores"] == pytest.approx(0.1)
    assert watched["telemetry"]["cpu_util_mean"] == pytest.approx(80 / psutil.cpu_count())


def test_a_sample_counts_the_time_of_the_children_a_process_reaped():
    """A real process runs a child to its end, says how much CPU time its reaped children
    took, and waits: its sample holds that time beside its own."""
    script = ("import resource, subprocess, sys\n"
              "subprocess.run([sys.executable, '-c', 'sum(range(10**7))'], check=True)\n"
              "usage = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
              "print(usage.ru_utime + usage.ru_stime, flush=True)\n"
              "sys.stdin.read()\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        children_s = float(parent.stdout.readline())
        process = psutil.Process(parent.pid)
        [sampled] = CellMonitor([], telemetry=True).sample([process])["processes"].values()
        own = process.cpu_times()
    finally:
        parent.kill()
        parent.wait()
    assert children_s > 0 and sampled["parent"] == os.getpid()
    # The kernel counts in ticks of 10 ms, once for user and once for system time.
    assert sampled["cpu_s"] - own.user - own.system == pytest.approx(children_s, abs=0.03)


def test_a_look_before_the_cell_only_without_telemetry_or_while_waiting_for_quiet():
    looks = []

    def look(seconds=QUIET_CHECK_S):
        looks.append(seconds)
        return 0.1

    assert look_before(WatchSettings(), look=look) == (None, None)
    assert looks == []  # the cell's own samples tell
    assert look_before(WatchSettings(telemetry=False), look=look) == (None, 0.1)
    assert looks == [BEFORE_CHECK_S]
    waited_s, cores = look_before(WatchSettings(wait_for_quiet_s=60), look=look)
    assert cores == 0.1 and waited_s >= 0 and looks == [BEFORE_CHECK_S, QUIET_CHECK_S]
