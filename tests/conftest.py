"""Shared helpers: run the real ``scaling`` command line and read what it recorded."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from cpugroup import join
from waiting import wait_until  # noqa: F401  (the tests' one wait on a condition)

from scaling.execute.ceiling import CEILINGS_ENV
from scaling.execute.processes import TOKEN_ENV


def scaling_cli(*args, env=None, timeout=900, cpu_group=None) -> subprocess.CompletedProcess:
    """The command line in a fresh process; with ``cpu_group`` (tests/cpugroup.py) it, and
    every process it starts, runs in that group."""
    return subprocess.run(
        [sys.executable, "-m", "scaling", *map(str, args)],
        capture_output=True, text=True, timeout=timeout, env=env,
        preexec_fn=(lambda: join(cpu_group)) if cpu_group else None,
    )


def fresh_process_value(script: str, *args):
    """What ``script`` prints last, read as JSON, run with ``args`` in a fresh interpreter:
    PyTorch and TensorFlow do not share a test process (torch loading triton after TensorFlow
    crashes it)."""
    ran = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True,
                         text=True, timeout=600, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout.strip().splitlines()[-1])


def scaling_in_process(*args):
    """The command line in this process (click's CliRunner), for input that is refused before
    any worker starts: its exit status as ``returncode``, its ``stdout`` and ``stderr``."""
    from click.testing import CliRunner

    from scaling.cli import cli

    result = CliRunner().invoke(cli, [str(arg) for arg in args], prog_name="scaling")
    result.returncode = result.exit_code
    return result


def read_records(out_dir) -> list:
    path = Path(out_dir) / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def scaling_cli_ok(*args, **kwargs) -> subprocess.CompletedProcess:
    """``scaling_cli`` for a command that must succeed."""
    result = scaling_cli(*args, **kwargs)
    assert result.returncode == 0, result.stderr
    return result


def swept_records(config, out_dir, **kwargs) -> list:
    """``scaling sweep CONFIG --out OUT_DIR`` (with ``scaling_cli``'s keywords): its records,
    with the command's exit status checked against them: 0 when every cell is ok, else 1."""
    result = scaling_cli("sweep", config, "--out", out_dir, **kwargs)
    assert result.returncode in (0, 1), result.stderr
    records = read_records(out_dir)
    assert result.returncode == (0 if all(r["status"] == "ok" for r in records) else 1)
    return records


def rank_reports(record) -> list:
    cell_dir = Path(record["log"]).parent
    return [json.loads(p.read_text()) for p in sorted(cell_dir.glob("rank*.json"))]


def check_images_per_sec(record, images: int) -> None:
    """The record's images/sec is ``images``, what the test asked for (per-device batch x
    devices x timed steps), over the longest rank window, each window read from its rank's
    start and end timestamps: neither figure is the harness's own sum or maximum."""
    window = max(report["end"] - report["start"] for report in rank_reports(record))
    assert record["timed_images"] == images
    # Wall-clock timestamps near 1.7e9 s differ exactly to within a microsecond.
    assert record["timed_window_s"] == pytest.approx(window, abs=1e-6)
    assert record["images_per_sec"] == pytest.approx(images / record["timed_window_s"])

def leftover_cell_processes(record) -> list:
    """Processes started for the cell of ``record`` (they carry its token) still alive."""
    left = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(TOKEN_ENV) == record["process_token"] \
                    and proc.status() != psutil.STATUS_ZOMBIE:
                left.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return left


def processes_mentioning(path) -> list:
    """Live processes whose command line names ``path`` (every rank gets its cell folder)."""
    left = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] != psutil.STATUS_ZOMBIE and \
                any(str(path) in arg for arg in proc.info["cmdline"] or []):
            left.append(proc)
    return left


def recorded_cell(devices, ips, status="ok", batch=32, repeat=0, workload="resnet50",
                  purpose="sweep", options=None, version="2.14.1", framework="torch",
                  launcher="torchrun", mode="train") -> dict:
    """A sweep record as ``results.jsonl`` holds it, for tests of what reads records."""
    return {
        "cell": f"{framework}-{launcher}-{workload}-{devices}-{batch}-{repeat}-{status}-"
                f"{purpose}-{options}-{version}-{mode}",
        "purpose": purpose, "versions": {framework: version} if status != "crashed" else None,
        "framework": framework, "launcher": launcher, "workload": workload,
        "device_type": "gpu", "devices": devices, "nodes": 1, "total_devices": devices,
        "batch_size": batch, "global_batch_size": batch * devices, "image_size": 224,
        "repeat": repeat, "options": options or {}, "mode": mode, "status": status,
        "error": None if status == "ok" else "rank 0: CUDA out of memory",
        "images_per_sec": ips if status == "ok" else None,
        "step_time_median_s": batch * devices / ips if status == "ok" else None,
    }


def write_records(out_dir: Path, records) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return out_dir


def write_sweep(path: Path, **overrides) -> Path:
    """The smallest sweep, with ``overrides``: one tiny torchrun cell, and no ``single``
    baseline unless ``single_baseline=True``."""
    import yaml

    spec = {
        "name": "test",
        "device_type": "cpu",
        "frameworks": {"torch": {"launchers": ["torchrun"]}},
        "workloads": ["cifar10"],
        "devices": [1],
        "batch_sizes": [4],
        "image_size": 16,
        "steps": 3,
        "warmup": 1,
        "timeout_s": 120,
        "single_baseline": False,
    }
    spec.update(overrides)
    path.write_text(yaml.safe_dump(spec))
    return path


def cell_logs(args) -> str:
    """The last lines of each cell's logs (every node's) under any results folder among
    ``args``: what a cell that failed in a full test run left to read."""
    logs = [log for arg in args if isinstance(arg, Path)
            for log in sorted(arg.glob("cells/*/launcher*.log"))]
    return "".join(f"\n{log}:\n" + "\n".join(log.read_text(errors="replace").splitlines()[-20:])
                   for log in logs)


@pytest.fixture
def out_dir(tmp_path) -> Path:
    return tmp_path / "out"


# Test files run longest first, so that the pytest processes, each taking whole files, finish
# together: the times are each file's total from the last `--record-file-times` run (files not
# listed run last, in their own order). The Makefile turns off xdist's own order (by count).
FILE_TIMES = Path(__file__).with_name("file_times.json")


def recorded_file_times() -> dict:
    return json.loads(FILE_TIMES.read_text()) if FILE_TIMES.exists() else {}


def pytest_addoption(parser):
    parser.addoption("--record-file-times", action="store_true",
                     help=f"add each test file's total time in this run to tests/{FILE_TIMES.name}")


def pytest_collection_modifyitems(items):
    times = recorded_file_times()
    items.sort(key=lambda item: -times.get(item.path.name, 0.0))


class FileTimes:
    """Sums the set-up, call and tear-down times of each file's tests, written at the end."""

    def __init__(self):
        self.times = {}

    def pytest_runtest_logreport(self, report):
        name = Path(report.nodeid.split("::")[0]).name
        self.times[name] = self.times.get(name, 0.0) + report.duration

    def pytest_sessionfinish(self):
        times = recorded_file_times()
        times.update({name: round(total, 1) for name, total in self.times.items()})
        FILE_TIMES.write_text(json.dumps(dict(sorted(times.items())), indent=1) + "\n")


def pytest_configure(config):
    if config.getoption("record_file_times") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(FileTimes())
    if not hasattr(config, "workerinput") and CEILINGS_ENV not in os.environ:
        # One CPU matmul ceiling per key for the whole run, shared by the pytest processes
        # (started after this), rather than one per output folder.
        config.shared_ceilings = Path(tempfile.mkdtemp(prefix="scaling-ceilings-"))
        os.environ[CEILINGS_ENV] = str(config.shared_ceilings / "ceilings.jsonl")


def pytest_unconfigure(config):
    if hasattr(config, "shared_ceilings"):
        shutil.rmtree(config.shared_ceilings, ignore_errors=True)
        del os.environ[CEILINGS_ENV]
