"""A sweep killed with SIGKILL and resumed records every cell exactly once."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Optional

import pytest
from conftest import processes_mentioning, read_records, scaling_cli, wait_until, write_sweep

from scaling.execute.store import ResultStore
from scaling.sweep import expand, load_sweep


def running_after_a_record(out_dir: Path) -> Optional[Path]:
    """The folder of a cell whose processes run while an earlier cell is recorded: the point at
    which the sweep is killed, with work done, work under way and work not started."""
    recorded = {record["cell"] for record in ResultStore(out_dir).records()}
    if not recorded:
        return None
    return next((folder for folder in (out_dir / "cells").iterdir()
                 if folder.name not in recorded and processes_mentioning(folder)), None)


@pytest.mark.slow
def test_sigkilled_sweep_resumes_without_lost_or_repeated_cells(tmp_path, out_dir):
    config = write_sweep(tmp_path / "sweep.yaml", batch_sizes=[2, 4], devices=[1, 2])
    expected = {cell.cell_id for cell in expand(load_sweep(config))}
    assert len(expected) == 4

    sweep = subprocess.Popen([sys.executable, "-m", "scaling", "sweep", config, "--out", out_dir],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cut_short = wait_until(lambda: running_after_a_record(out_dir), "cell running after a record")
    sweep.kill()
    sweep.wait()
    recorded = {record["cell"] for record in read_records(out_dir)}
    assert cut_short.name not in recorded and len(recorded) < len(expected)
    wait_until(lambda: processes_mentioning(out_dir) == [], "end of the killed sweep's ranks")

    refused = scaling_cli("sweep", config, "--out", out_dir)
    assert refused.returncode == 2
    assert "pass --resume" in refused.stderr

    resumed = scaling_cli("sweep", config, "--out", out_dir, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert f"{len(recorded)} already recorded" in resumed.stdout
    counts = Counter(r["cell"] for r in read_records(out_dir))
    assert set(counts) == expected
    assert set(counts.values()) == {1}
    assert all(r["status"] == "ok" for r in read_records(out_dir))
    assert (cut_short / "record.json").exists()
