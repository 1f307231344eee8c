"""Watching a cell from outside its processes.

Noise: the CPU time of processes other than the cell's and the harness's, before the timed
window and during it, and on GPUs any process on the cell's devices that is not the cell's.
Before the window, the samples of the cell's start, build and warm-up tell, and so does the
look at the machine just before the cell starts where there is one (without telemetry, or the
last look of a wait for quiet). Telemetry: the CPU use and RSS of the cell's processes, and on
GPUs each device's utilisation, memory, power, temperature and SM clock (NVIDIA's management
library).

With telemetry on (the default), a thread samples every ``SAMPLE_S`` seconds while the cell
runs. Only the samples inside the timed window, as the ranks report it on this host's clock,
make the summary, the noise during the window and the series kept in the cell's folder;
warm-up, start-up and shut-down are left out of them (the samples before the window judge the
noise before it alone). With telemetry off nothing samples the cell, and its noise is judged
from the look at the machine just before it starts.

A process of the cell that ends between two samples, reaped by another of the cell's (a
compiler or ``ldconfig`` that a rank runs while it builds), is the cell's: each process's CPU
time counts its reaped children's.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import psutil
from scaling.workers.common import process_ranks

SAMPLE_S = 0.5
"""Seconds between samples."""
NOISE_CORES = 0.25
"""Other processes using more than this many cores make a cell noisy."""
QUIET_CHECK_S = 1.0
"""How long each look at the machine lasts while waiting for quiet."""
BEFORE_CHECK_S = 0.25
"""How long the look at the machine lasts just before a cell starts, without telemetry."""
TELEMETRY_FILE = "telemetry.jsonl"


@dataclass(frozen=True)
class WatchSettings:
    """How cells are watched: ``telemetry`` samples the cell; ``wait_for_quiet_s`` (None: do
    not wait) waits up to that long, before each cell, for other processes to go quiet."""

    telemetry: bool = True
    wait_for_quiet_s: Optional[float] = None


def _busy_seconds() -> float:
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


def _own_seconds() -> float:
    times = psutil.Process().cpu_times()
    return times.user + times.system + times.children_user + times.children_system


def other_cores(seconds: float = QUIET_CHECK_S) -> float:
    """Cores that processes other than this one used over the next ``seconds``."""
    busy, own, started = _busy_seconds(), _own_seconds(), time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    return max(0.0, (_busy_seconds() - busy) - (_own_seconds() - own)) / elapsed


def look_before(watch: WatchSettings, on_busy: Optional[Callable[[float], None]] = None,
                look: Callable[..., float] = other_cores
                ) -> Tuple[Optional[float], Optional[float]]:
    """What the harness sees of the machine just before a cell: (seconds waited for quiet, the
    cores other processes used at the last look). It waits for quiet where ``watch`` says so;
    without telemetry, which leaves the cell unsampled, it looks for :data:`BEFORE_CHECK_S`;
    otherwise it does neither, (None, None): the samples of the cell's start, build and
    warm-up tell (:func:`cores_before`)."""
    if watch.wait_for_quiet_s is not None:
        return wait_for_quiet(watch.wait_for_quiet_s, on_busy, look)
    if not watch.telemetry:
        return None, look(BEFORE_CHECK_S)
    return None, None


def wait_for_quiet(limit_s: float, on_busy: Optional[Callable[[float], None]] = None,
                   look: Callable[[], float] = other_cores) -> Tuple[float, float]:
    """Wait until other processes use at most ``NOISE_CORES``, up to ``limit_s`` seconds;
    ``on_busy`` gets the cores they used at each look after which the wait goes on. ``look``
    measures those cores (by default :func:`other_cores`: every process but this one).
    Returns (seconds waited, cores they used at the last look)."""
    started = time.monotonic()
    cores = look()
    while cores > NOISE_CORES and time.monotonic() - started < limit_s:
        if on_busy:
            on_busy(cores)
        cores = look()
    return time.monotonic() - started, cores


class Nvml:
    """The cell's GPUs through nvidia-ml-py; absent (None from :meth:`open`) where there is no
    NVIDIA driver."""

    def __init__(self, pynvml, indices: List[int]):
        self.nvml = pynvml
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(index) for index in indices]

    @classmethod
    def open(cls, indices: List[int]) -> Optional["Nvml"]:
        try:
            import pynvml

            pynvml.nvmlInit()
            return cls(pynvml, indices)
        except Exception:  # no library, no driver, no such device: no GPU telemetry
            return None

    def sample(self) -> Tuple[List[Dict], set]:
        """Per device readings, and the pids of every process computing on the devices."""
        nvml, devices, pids = self.nvml, [], set()
        for handle in self.handles:
            reading = {}
            for key, read in (
                    ("util_pct", lambda h: nvml.nvmlDeviceGetUtilizationRates(h).gpu),
                    ("memory_used_bytes", lambda h: nvml.nvmlDeviceGetMemoryInfo(h).used),
                    ("power_w", lambda h: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0),
                    ("energy_j", lambda h: nvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0),
                    ("temperature_c", lambda h: nvml.nvmlDeviceGetTemperature(
                        h, nvml.NVML_TEMPERATURE_GPU)),
                    ("sm_clock_mhz", lambda h: nvml.nvmlDeviceGetClockInfo(
                        h, nvml.NVML_CLOCK_SM))):
                with contextlib.suppress(nvml.NVMLError):
                    reading[key] = read(handle)
            devices.append(reading)
            with contextlib.suppress(nvml.NVMLError):
                pids |= {p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)}
        return devices, pids

    def close(self) -> None:
        with contextlib.suppress(self.nvml.NVMLError):
            self.nvml.nvmlShutdown()


class CellMonitor:
    """Samples a running cell's process tree, the rest of the machine and the cell's GPUs."""

    def __init__(self, gpu_indices: List[int], telemetry: bool = True):
        self.telemetry = telemetry
        self.nvml = Nvml.open(gpu_indices) if gpu_indices and telemetry else None
        self.samples: List[Dict] = []
        self.root: Optional[psutil.Process] = None
        self.ranks: Dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self, pid: int) -> None:
        """Sample the process tree of ``pid`` until :meth:`stop` (nothing without telemetry)."""
        if not self.telemetry:
            return
        with contextlib.suppress(psutil.NoSuchProcess):
            self.root = psutil.Process(pid)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if self.nvml:
            self.nvml.close()

    def _tree(self) -> List[psutil.Process]:
        with contextlib.suppress(psutil.NoSuchProcess):
            return [self.root, *self.root.children(recursive=True)]
        return []

    def _rank(self, proc: psutil.Process) -> Optional[int]:
        """The rank of a worker process (one that runs ``scaling.workers.*``); None for
        launchers and agents."""
        if proc.pid not in self.ranks:
            self.ranks[proc.pid] = None
            with contextlib.suppress(psutil.Error, ValueError):
                if any(arg.startswith("scaling.workers.") for arg in proc.cmdline()):
                    self.ranks[proc.pid] = process_ranks(proc.environ())[0]
        return self.ranks[proc.pid]

    def _run(self) -> None:
        """Sample every ``SAMPLE_S`` seconds, each time over the tree as it is then, so that a
        rank started since the last sample is the cell's, not another process."""
        while not self._stop.is_set():
            self.samples.append(self.sample(self._tree()))
            self._stop.wait(SAMPLE_S)

    def sample(self, tree: List[psutil.Process]) -> Dict:
        processes = {}
        for proc in tree:
            with contextlib.suppress(psutil.Error):
                with proc.oneshot():
                    times = proc.cpu_times()
                    processes[proc.pid] = {"cpu_s": times.user + times.system +
                                           times.children_user + times.children_system,
                                           "parent": proc.ppid(),
                                           "rss_bytes": proc.memory_info().rss,
                                           "rank": self._rank(proc)}
        sample = {"t": time.time(), "busy_s": _busy_seconds(), "own_s": _own_seconds(),
                  "processes": processes}
        if self.nvml:
            sample["gpus"], gpu_pids = self.nvml.sample()
            sample["gpu_others"] = sorted(gpu_pids - set(processes))
        return sample


def _intervals(samples: List[Dict], start: float, end: float) -> List[Dict]:
    """What happened between consecutive samples, for the intervals that overlap the window.
    The cell's CPU time in an interval is its processes' growth since the last sample, and all
    of the time of a process that started since (a loader's workers, started as the window
    ends): it is the cell's, not another process's. A process's time counts its reaped
    children's, so one that ended since, reaped by another of the cell's, is in its parent's
    growth whole, and what the earlier samples counted of it is taken off."""
    intervals = []
    for before, after in zip(samples, samples[1:]):
        if after["t"] < start or before["t"] > end:
            continue
        seconds = after["t"] - before["t"]
        earlier, now = before["processes"], after["processes"]
        reaped = sum(proc["cpu_s"] for pid, proc in earlier.items()
                     if pid not in now and proc.get("parent") in now)
        cell = max(0.0, sum(max(0.0, proc["cpu_s"] - earlier.get(pid, {}).get("cpu_s", 0.0))
                            for pid, proc in now.items()) - reaped)
        outside = (after["busy_s"] - before["busy_s"]) - (after["own_s"] - before["own_s"]) - cell
        intervals.append({"t": after["t"], "seconds": seconds, "cell_cores": cell / seconds,
                          "other_cores": max(0.0, outside / seconds), "sample": after,
                          "before": before})
    return intervals


def cores_before(samples: List[Dict], start: float) -> Optional[float]:
    """Cores other processes used, on average, from the first sample (the cell's tree
    starting, or its shared tree taking the cell) to the window's ``start``: over the
    intervals that end by then, or the first interval where none does; None without one."""
    intervals = _intervals(samples, samples[0]["t"], start) if samples else []
    before = [i for i in intervals if i["t"] <= start] or intervals[:1]
    seconds = sum(i["seconds"] for i in before)
    return sum(i["other_cores"] * i["seconds"] for i in before) / seconds if before else None


def summarize_watch(monitor: CellMonitor, window: Optional[Tuple[float, float]],
                    before_cores: Optional[float], waited_s: Optional[float],
                    cell_dir: Path) -> Dict:
    """``noisy``, ``noise``, ``noise_cores`` (None without samples in the window), and
    ``telemetry`` for the record; the window's series goes to ``cell_dir/telemetry.jsonl``.
    Noise before the window is what the look just before the cell saw (``before_cores``; None
    without one) and what the samples before the window tell (:func:`cores_before`)."""
    reasons = []
    if before_cores is not None and before_cores > NOISE_CORES:
        waited = f" after waiting {waited_s:.0f} s for quiet" if waited_s else ""
        reasons.append(f"other processes used {before_cores:.2f} cores of "
                       f"{psutil.cpu_count()} before the cell{waited}")
    sampled = cores_before(monitor.samples, window[0]) if window else None
    if sampled is not None and sampled > NOISE_CORES:
        reasons.append(f"other processes used {sampled:.2f} cores of {psutil.cpu_count()} "
                       "before the window")
    intervals = _intervals(monitor.samples, *window) if window else []
    during = statistics.fmean(i["other_cores"] for i in intervals) if intervals else None
    if during is not None and during > NOISE_CORES:
        reasons.append(f"other processes used {during:.2f} cores of {psutil.cpu_count()} during "
                       "the window")
    others = sorted({pid for i in intervals for pid in i["sample"].get("gpu_others", [])})
    if others:
        reasons.append(f"processes {others} that are not the cell's ran on its GPUs")
    result = {"noisy": bool(reasons), "noise": "; ".join(reasons) or None,
              "noise_cores": during, "quiet_wait_s": waited_s, "telemetry": None}
    if intervals:
        result["telemetry"] = _telemetry(intervals, window)
        with open(cell_dir / TELEMETRY_FILE, "w") as series:
            for interval in intervals:
                series.write(json.dumps({key: value for key, value in interval.items()
                                         if key not in ("sample", "before")}
                                        | _series_point(interval)) + "\n")
    return result


def _series_point(interval: Dict) -> Dict:
    sample = interval["sample"]
    point = {"rss_bytes": {str(p["rank"]): p["rss_bytes"] for p in
                           sample["processes"].values() if p["rank"] is not None}}
    if "gpus" in sample:
        point["gpus"] = sample["gpus"]
    return point


def _telemetry(intervals: List[Dict], window: Tuple[float, float]) -> Dict:
    cores = psutil.cpu_count()
    rss = {}
    for interval in intervals:
        for proc in interval["sample"]["processes"].values():
            if proc["rank"] is not None:
                rss[proc["rank"]] = max(rss.get(proc["rank"], 0), proc["rss_bytes"])
    summary = {
        "samples": len(intervals), "sample_s": SAMPLE_S,
        "cpu_util_mean": 100 * statistics.fmean(i["cell_cores"] for i in intervals) / cores,
        "rss_max_bytes_per_rank": [rss[rank] for rank in sorted(rss)],
    }
    gpus = [i["sample"]["gpus"] for i in intervals if "gpus" in i["sample"]]
    if gpus:
        def values(key):
            return [device[key] for sample in gpus for device in sample if key in device]

        if values("util_pct"):
            summary["gpu_util_mean"] = statistics.fmean(values("util_pct"))
        if values("memory_used_bytes"):
            summary["gpu_memory_max_bytes"] = max(values("memory_used_bytes"))
        powers = [sum(device.get("power_w", 0.0) for device in sample) for sample in gpus]
        if values("power_w"):
            summary["power_mean_w"] = statistics.fmean(powers)
            summary["energy_j"] = summary["power_mean_w"] * (window[1] - window[0])
            summary["energy_source"] = "mean power x window"
        counted = _counted_energy(intervals, window)
        if counted is not None:
            summary["energy_j"], summary["energy_source"] = counted, "energy counter"
        if values("temperature_c"):
            summary["temperature_max_c"] = max(values("temperature_c"))
        if values("sm_clock_mhz"):
            summary["sm_clock_mean_mhz"] = statistics.fmean(values("sm_clock_mhz"))
    return summary


def _counted_energy(intervals: List[Dict], window: Tuple[float, float]) -> Optional[float]:
    """Joules over the window from the devices' cumulative energy counters (NVML, Volta and
    later): the counters' rise from the sample before the first interval to the last sample,
    scaled from that span to the window; None where a device gives no counter."""
    first, last = intervals[0]["before"].get("gpus"), intervals[-1]["sample"].get("gpus")
    if not first or not last or not all("energy_j" in d for d in [*first, *last]):
        return None
    span = intervals[-1]["sample"]["t"] - intervals[0]["before"]["t"]
    rise = sum(after["energy_j"] - before["energy_j"] for before, after in zip(first, last))
    return rise * (window[1] - window[0]) / span if span > 0 else None


def window_on_this_host(reports: List[Dict], host: str) -> Optional[Tuple[float, float]]:
    """The timed window as this host's ranks report it (wall clock), or None."""
    mine = [r for r in reports if r.get("host") == host and "start" in r and "end" in r]
    if not mine:
        return None
    return min(r["start"] for r in mine), max(r["end"] for r in mine)


def gpu_indices(device_type: str, devices: int) -> List[int]:
    """The GPUs a cell's ranks use on this host: the first ``devices`` visible ones."""
    if device_type != "gpu":
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        return [int(index) for index in visible.split(",")[:devices] if index.strip().isdigit()]
    return list(range(devices))
