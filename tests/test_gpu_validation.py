"""``bench/gpu_validation.py``, the one command that validates every CUDA path on a lent GPU, kept
from rotting on CPU: its dry run plans every step within 40 minutes and parses every command
through the harness's own command line; on a machine without a GPU it runs only its install
step, and writes that step's results as it ends."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu_validation.py"
sys.path.insert(0, str(SCRIPT.parent))

from gpu_steps import (RECORD_KEYS, REFERENCES, ROW_KEYS, STEPS, Context,  # noqa: E402
                       reference_summary)
from gpu_validation import check_command  # noqa: E402

from scaling.errors import ScalingError  # noqa: E402
from scaling.report.columns import CSV_COLUMNS  # noqa: E402
from scaling.schema import RECORD_FIELDS  # noqa: E402


def validation(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=600)


def plan_of(output: str) -> dict:
    """Step name -> its estimate in seconds, or its reason where the plan left it out."""
    planned = dict(re.findall(r"^  (\w+) +(\d+) s  ", output, re.MULTILINE))
    left_out = dict(re.findall(r"^  (\w+) +left out: (.*)$", output, re.MULTILINE))
    return {**{name: int(seconds) for name, seconds in planned.items()}, **left_out}


def test_the_dry_run_plans_every_step_within_forty_minutes_and_every_command_parses():
    dry = validation("--dry-run")
    assert dry.returncode == 0, dry.stderr
    plan = plan_of(dry.stdout)
    assert list(plan) == [step.name for step in STEPS if step.name != "allreduce"] + [
        "allreduce"]
    assert plan["allreduce"] == "one GPU: no allreduce across GPUs"
    total = sum(seconds for seconds in plan.values() if isinstance(seconds, int))
    assert 0 < total <= 40 * 60
    assert dry.stdout.splitlines()[-1] == (f"{len(STEPS) - 1} steps, {total} s "
                                           f"({total / 60:.1f} min) of 2400 s; every "
                                           "command parses.")


def test_a_small_budget_keeps_the_first_steps_and_says_why_the_rest_are_left_out():
    dry = validation("--dry-run", "--budget-s", "200")
    assert dry.returncode == 0, dry.stderr
    plan = plan_of(dry.stdout)
    assert [name for name, value in plan.items() if isinstance(value, int)] == [
        "install", "throughput", "reference"]
    assert plan["telemetry"] == "over the budget: 10 s left of 200 s"


def test_on_eight_gpus_the_allreduce_runs_across_them():
    dry = validation("--dry-run", "--gpus", "8", "--steps", "throughput,allreduce")
    assert dry.returncode == 0, dry.stderr
    assert list(plan_of(dry.stdout)) == ["throughput", "allreduce"]
    assert "scaling allreduce --devices 8 --device-type gpu" in dry.stdout


def test_an_unknown_step_is_a_one_line_error_naming_the_steps():
    bad = validation("--dry-run", "--steps", "throughput,warp")
    assert bad.returncode == 2
    assert bad.stderr.splitlines() == [
        "Error: unknown step 'warp'; the steps are " + ", ".join(s.name for s in STEPS)]


def test_the_check_refuses_what_the_harness_would_not_take(tmp_path):
    with pytest.raises(click.UsageError):
        check_command(["scaling", "run", "--batch-size", "8", "--no-such-option"])
    with pytest.raises(click.BadParameter):
        check_command(["scaling", "run", "--batch-size", "8", "--device-type", "tpu"])
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"frameworks": {"torch": {"launchers": ["torchrun"]}},
                                     "workloads": ["resnet50"], "batch_sizes": [8],
                                     "warp": 9}))
    with pytest.raises(ScalingError, match="warp"):
        check_command(["scaling", "sweep", str(sweep)])


def test_without_a_gpu_only_the_install_step_runs_and_its_results_are_written(tmp_path):
    output = tmp_path / "gpu.json"
    ran = validation("--out", str(tmp_path / "runs"), "--output", str(output))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    results = json.loads(output.read_text())
    assert results["gpus"] == 0 and results["planned"] == ["install"]
    assert set(results["left_out"].values()) == {"no GPU here"}
    install = results["steps"]["install"]
    assert install["status"] == "ok"
    assert [c["exit"] for c in install["commands"]] == [0]
    assert install["commands"][0]["argv"][-2:] == ["scaling", "devices"]
    assert install["figures"]["frameworks"]["torch"] is False
    assert "cpu" in (tmp_path / "runs" / "install" / "log.txt").read_text().lower()


def test_the_published_comparison_takes_the_fastest_one_gpu_torchrun_row(tmp_path):
    """The throughput step's sweep, as its results.csv and records would read on an H100."""
    out = tmp_path / "throughput" / "out"
    out.mkdir(parents=True)
    rows = [("single", 1, 128, "ok", 2700.0), ("torchrun", 1, 128, "ok", 2400.0),
            ("torchrun", 1, 256, "ok", 2550.0), ("torchrun", 1, 512, "oom", ""),
            ("torchrun", 8, 256, "ok", 20000.0)]
    with (out / "results.csv").open("w") as table:
        writer = csv.writer(table)
        writer.writerow(["launcher", "total_devices", "batch_size", "status", "images_per_sec"])
        writer.writerows(rows)
    (out / "results.jsonl").write_text(json.dumps({"cell": "c1", "device_name":
                                                   "NVIDIA H100 80GB HBM3"})
                                       + "\n")
    found = reference_summary(Context(tmp_path, 8, {}))
    source, published = REFERENCES["H100"]
    assert (found["measured_images_per_sec"], found["batch_size"]) == (2550.0, "256")
    assert (found["published"], found["published_images_per_sec"]) == (source, published)
    assert found["ratio"] == pytest.approx(2550.0 / published)
    assert found["what_differs"]


def test_what_the_steps_keep_is_what_the_harness_writes():
    """A renamed column or record field would leave a GPU run's figures empty, unnoticed."""
    assert [key for key in ROW_KEYS if key not in CSV_COLUMNS] == []
    assert [key for key in RECORD_KEYS if key not in RECORD_FIELDS] == []


def test_told_of_a_gpu_without_cuda_every_step_after_the_install_is_left_out(tmp_path):
    """Told of one GPU on a machine without CUDA: the install runs, its check finds no
    framework that imports with CUDA, and every later step is left out with its reason."""
    output = tmp_path / "gpu.json"
    ran = validation("--gpus", "1", "--out", str(tmp_path / "runs"), "--output", str(output))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    results = json.loads(output.read_text())
    assert results["planned"] == ["install"]
    assert not any(results["steps"]["install"]["figures"]["frameworks"].values())
    reasons = results["left_out"]
    assert reasons.pop("allreduce") == "one GPU: no allreduce across GPUs"
    assert reasons.pop("reference") == "needs throughput, not planned"
    own = {"jax", "tensorflow", "mxnet"}
    assert reasons == {name: f"{name if name in own else 'torch'} does not import with CUDA here"
                       for name in reasons}
    assert len(reasons) == len(STEPS) - 3
