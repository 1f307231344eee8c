"""Real MXNet runs in its own virtualenv: Gluon networks over N contexts with a kvstore."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import (check_images_per_sec, rank_reports, read_records, scaling_cli,
                      scaling_in_process, write_sweep)
from scaling.frameworks import get_framework
from scaling.workers.mxnet.device import cpu_has_bf16
from test_tensorflow_runs import trainable_parameters
from workloads import WORKLOADS

MXNET_PYTHON = get_framework("mxnet").default_python()
REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not Path(MXNET_PYTHON).exists(),
                                reason=f"no MXNet environment at {MXNET_PYTHON} (make mxnet-env)")


def run_mx(out_dir, workload="cifar10", devices=1, batch=8, size=32, steps=3, warmup=2,
           extra=()):
    result = scaling_cli(
        "run", "--framework", "mxnet", "--launcher", "mxnet-kvstore", "--workload", workload,
        "--devices", devices, "--batch-size", batch, "--image-size", size, "--steps", steps,
        "--warmup", warmup, "--device-type", "cpu", "--timeout", 300, "--out", out_dir, *extra,
    )
    assert result.returncode in (0, 1), result.stderr
    record = read_records(out_dir)[-1]
    assert result.returncode == (0 if record["status"] == "ok" else 1)
    return record


# Timed steps of the contexts sweep's cells, after one of warm-up.
SWEEP_STEPS = 2


@pytest.fixture(scope="module")
def contexts_sweep(tmp_path_factory):
    """One sweep of CIFAR-10 at 32x32 (its nominal size), batch 8, 2 steps, on 1 and 2 devices
    under mxnet-kvstore, and beside them one PyTorch cell (under ``single``, the cheapest
    launcher: what it shows is a PyTorch row in the same report), with no references (nothing
    here reads them): its result and its records."""
    folder = tmp_path_factory.mktemp("contexts")
    config = write_sweep(folder / "mixed.yaml", frameworks={
        "torch": {"launchers": ["single"]},
        "mxnet": {"launchers": ["mxnet-kvstore"], "python": MXNET_PYTHON},
    }, devices=[1, 2], batch_sizes=[8], image_size=32, steps=SWEEP_STEPS, warmup=1,
        references="none", timeout_s=300)
    result = scaling_cli("sweep", config, "--out", folder / "out")
    assert result.returncode == 0, result.stderr
    return result, read_records(folder / "out")


@pytest.mark.slow
@pytest.mark.parametrize("devices", [1, 2])
def test_cifar10_over_cpu_contexts(contexts_sweep, devices):
    [record] = [r for r in contexts_sweep[1]
                if (r["framework"], r["devices"]) == ("mxnet", devices)]
    assert record["status"] == "ok", record["error"]
    assert record["params"] == 1_756_426
    assert record["versions"]["mxnet"] == "1.9.1"
    [report] = rank_reports(record)
    assert report["contexts"] == devices
    assert report["kvstore"] == "local" and report["hybridized"]
    check_images_per_sec(record, 8 * devices * SWEEP_STEPS)


@pytest.mark.slow
@pytest.mark.parametrize("workload, size", [
    ("alexnet", 63), ("googlenet", 32), ("resnet50", 32), ("inception_v3", 75),
])
def test_each_imagenet_workload_trains_at_a_small_size(out_dir, workload, size):
    record = run_mx(out_dir, workload=workload, batch=2, size=size, steps=1, warmup=1)
    assert record["status"] == "ok", record["error"]


@pytest.mark.slow
def test_gluon_workloads_match_pytorch_parameter_counts():
    script = """
import json
from workloads import WORKLOADS
counts = {}
for w in WORKLOADS.values():
    net = w.builder("workloads.gluon_models")(w.input_size, w.classes)
    net.initialize()
    import mxnet as mx
    net(mx.nd.zeros((1, w.channels, w.input_size, w.input_size)))
    counts[w.name] = int(sum(p.data().size for p in net.collect_params().values()
                             if p.grad_req != "null"))
print(json.dumps(counts))
"""
    out = subprocess.run([MXNET_PYTHON, "-c", script], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    gluon = json.loads(out.stdout.strip().splitlines()[-1])
    torch_counts = trainable_parameters("torch")
    assert gluon == torch_counts and set(gluon) == set(WORKLOADS)
    assert gluon["mnist_mlp"] == 2_797_010


def test_allocation_over_the_memory_cap_is_oom(out_dir):
    record = run_mx(out_dir, devices=2, batch=4096, steps=1, warmup=1,
                    extra=("--memory-limit", "1GiB"))
    assert record["status"] == "oom"
    assert "MXNetError" in record["error"] and "allocate" in record["error"]


def test_kvstore_choice_is_recorded_and_checked(out_dir):
    record = run_mx(out_dir, devices=2, batch=2, size=16, steps=1, warmup=1,
                    extra=("--option", "kvstore=device"))
    assert record["status"] == "ok", record["error"]
    assert rank_reports(record)[0]["kvstore"] == "device"
    refused = scaling_in_process("run", "--framework", "mxnet", "--launcher", "mxnet-kvstore",
                                 "--workload", "cifar10", "--batch-size", 2,
                                 "--option", "kvstore=mpi")
    assert refused.returncode == 2
    assert "option kvstore takes one of device, nccl, local; got 'mpi'" in refused.stderr


def test_amp_runs_where_the_cpu_has_bf16_and_says_why_not_elsewhere(out_dir):
    record = run_mx(out_dir, batch=2, size=16, steps=1, warmup=1, extra=("--option", "amp=true"))
    assert record["options"] == {"amp": True}
    if cpu_has_bf16():
        assert record["status"] == "ok", record["error"]
    else:
        assert record["status"] == "error"
        assert "need a CPU with AVX512-BF16 or AMX-BF16" in record["error"]


@pytest.mark.slow
def test_mixed_sweep_reports_torch_and_mxnet_rows(contexts_sweep):
    result, records = contexts_sweep
    assert sorted((r["framework"], r["launcher"], r["devices"], r["status"])
                  for r in records) == [
        ("mxnet", "mxnet-kvstore", 1, "ok"), ("mxnet", "mxnet-kvstore", 2, "ok"),
        ("torch", "single", 1, "ok")]
    table_rows = [line for line in result.stdout.splitlines() if "│" in line]
    assert any("mxnet" in line and "mxnet-kvstore" in line for line in table_rows)
    assert any("torch" in line and "single" in line for line in table_rows)


@pytest.mark.slow
def test_missing_mxnet_environment_fails_fast_while_other_cells_run(tmp_path, out_dir):
    # The other cell runs under single, the cheapest launcher.
    config = write_sweep(tmp_path / "missing.yaml", frameworks={
        "mxnet": {"launchers": ["mxnet-kvstore"], "python": str(tmp_path / "no-venv/bin/python")},
        "torch": {"launchers": ["single"]},
    }, steps=1, references="none")
    result = scaling_cli("sweep", config, "--out", out_dir)
    assert result.returncode == 3, result.stderr  # every cell ran; an environment is missing
    by_framework = {r["framework"]: r for r in read_records(out_dir)}
    assert by_framework["torch"]["status"] == "ok"
    mxnet = by_framework["mxnet"]
    assert mxnet["status"] == "env_error" and mxnet["wall_s"] == 0
    assert "make mxnet-env" in mxnet["error"] and "\n" not in mxnet["error"]
