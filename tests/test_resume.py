"""A sweep killed with SIGKILL and resumed records every cell exactly once."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter

from conftest import processes_mentioning, read_records, scaling_cli, write_sweep

from scaling.execute.store import ResultStore
from scaling.sweep import expand, load_sweep


def wait_for_records(out_dir, count, timeout=300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(ResultStore(out_dir).records()) >= count:
            return
        time.sleep(0.2)
    raise AssertionError(f"fewer than {count} records after {timeout} s")


def test_sigkilled_sweep_resumes_without_lost_or_repeated_cells(tmp_path, out_dir):
    config = write_sweep(tmp_path / "sweep.yaml", batch_sizes=[2, 4, 8], devices=[1, 2])
    expected = {cell.cell_id for cell in expand(load_sweep(config))}
    assert len(expected) == 6

    sweep = subprocess.Popen([sys.executable, "-m", "scaling", "sweep", config, "--out", out_dir],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_records(out_dir, 2)
    sweep.send_signal(signal.SIGKILL)
    sweep.wait()
    interrupted = len(read_records(out_dir))
    assert 2 <= interrupted < 6
    time.sleep(2)
    assert processes_mentioning(out_dir) == []

    refused = scaling_cli("sweep", config, "--out", out_dir)
    assert refused.returncode == 2
    assert "pass --resume" in refused.stderr

    resumed = scaling_cli("sweep", config, "--out", out_dir, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert f"{interrupted} already recorded" in resumed.stdout
    counts = Counter(r["cell"] for r in read_records(out_dir))
    assert set(counts) == expected
    assert set(counts.values()) == {1}
    assert all(r["status"] == "ok" for r in read_records(out_dir))
