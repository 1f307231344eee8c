"""The communication knobs of tf-mirrored, tf-multiworker, mxnet-kvstore and jax: each cell runs
with several set at once, records them, is a cell of its own, and its workers read back what is
in effect (``communication_in_effect`` in each rank report); where a knob cannot run on CPU, the
cell ends ``error`` with the reason."""

from __future__ import annotations

import pytest

from conftest import rank_reports, read_records, scaling_cli
from scaling.cell import make_cell

MXNET_PYTHON = ".venv-mxnet/bin/python"


def run_cell(out_dir, framework, launcher, *options, python=None):
    """A tiny two-device CPU cell with ``options`` (``key=value``): its record and whether the
    command exited 0."""
    pairs = [arg for option in options for arg in ("--option", option)]
    result = scaling_cli("run", "--framework", framework, "--launcher", launcher,
                         "--workload", "cifar10", "--image-size", 16, "--batch-size", 4,
                         "--devices", 2, "--device-type", "cpu", "--threads-per-device", 1,
                         "--steps", 2, "--warmup", 1, "--timeout", 600, "--out", out_dir,
                         *(["--python", python] if python else []), *pairs)
    return read_records(out_dir)[-1], result.returncode


def ok_cell(out_dir, framework, launcher, options: dict, python=None):
    """The record and rank reports of an ``ok`` cell with ``options``, whose id is not the
    default cell's."""
    record, _ = run_cell(out_dir, framework, launcher,
                         *(f"{key}={value}" for key, value in options.items()), python=python)
    assert record["status"] == "ok", record["error"]
    assert record["options"] == options

    def cell_id(**chosen):
        return make_cell(framework=framework, launcher=launcher, workload="cifar10", devices=2,
                         batch_size=4, image_size=16, steps=2, warmup=1, device_type="cpu",
                         threads_per_device=1, options=chosen, collective_env={}).cell_id

    assert cell_id(**options) != cell_id()
    return record, rank_reports(record)


def assert_refused(out_dir, framework, launcher, option, reason, python=None):
    record, returncode = run_cell(out_dir, framework, launcher, option, python=python)
    assert returncode == 1
    assert record["status"] == "error" and reason in record["error"], record["error"]


@pytest.mark.slow
def test_tf_mirrored_reduces_through_the_chosen_cross_device_ops(tmp_path):
    _, reports = ok_cell(tmp_path / "ok", "tensorflow", "tf-mirrored",
                         {"cross_device_ops": "hierarchical_copy"})
    assert [report["communication_in_effect"] for report in reports] == \
        [{"cross_device_ops": "HierarchicalCopyAllReduce"}]
    assert_refused(tmp_path / "nccl", "tensorflow", "tf-mirrored", "cross_device_ops=nccl",
                   "cross_device_ops nccl does not run on CPU: NCCL reduces over GPUs only")


@pytest.mark.slow
def test_tf_multiworker_takes_its_implementation_and_pack_size(tmp_path):
    _, reports = ok_cell(tmp_path / "ok", "tensorflow", "tf-multiworker",
                         {"implementation": "auto", "pack_mb": 0.25})
    assert len(reports) == 2
    for report in reports:
        in_effect = report["communication_in_effect"]
        assert in_effect["implementation"] == "auto" and in_effect["pack_mb"] == 0.25
        # cifar10's gradients (about 2 MiB) go in several 0.25 MiB packs, not TF's one.
        assert in_effect["gradient_packs"] > 1


@pytest.mark.slow
def test_mxnet_kvstore_takes_its_type_and_big_array_bound(tmp_path):
    record, reports = ok_cell(tmp_path / "ok", "mxnet", "mxnet-kvstore",
                              {"kvstore": "device", "bigarray_bound": 4096}, python=MXNET_PYTHON)
    # The harness, not the worker, sets the bound: the record says which value ran.
    assert record["collective_env"]["MXNET_KVSTORE_BIGARRAY_BOUND"] == "4096"
    assert [report["communication_in_effect"] for report in reports] == \
        [{"kvstore": "device", "bigarray_bound": 4096}]
    assert_refused(tmp_path / "nccl", "mxnet", "mxnet-kvstore", "kvstore=nccl",
                   "kvstore nccl does not run on CPU: NCCL reduces over GPUs only",
                   python=MXNET_PYTHON)


@pytest.mark.slow
def test_jax_counts_the_compiled_all_reduces_and_refuses_the_combine_threshold_on_cpu(tmp_path):
    record, _ = run_cell(tmp_path / "plain", "jax", "jax")
    assert record["status"] == "ok", record["error"]
    [report] = rank_reports(record)
    in_effect = report["communication_in_effect"]
    assert in_effect["all_reduce_combine_mb"] is None and in_effect["all_reduce_ops"] > 0
    assert_refused(tmp_path / "combine", "jax", "jax", "all_reduce_combine_mb=4",
                   "all_reduce_combine_mb does not run on CPU: XLA's CPU backend has no "
                   "all-reduce combining threshold")
