"""Every launcher aggregates the gradients in ``forward_backward``: two replicas, each on its own
batch, end one step holding the same gradients.

Each rank report carries, per replica its process drives, ``data_sums`` (the sum of the
replica's input images) and ``gradient_sums`` (the sum of every element of its gradients after
the last step). Different batches give different local gradients, so equal gradient sums on
different data show that the step summed or averaged them across the replicas.
"""

from __future__ import annotations

import pytest

from conftest import rank_reports, read_records, scaling_cli_ok

LAUNCHERS = [
    ("torch", "torchrun"), ("torch", "horovod"),
    ("tensorflow", "tf-mirrored"), ("tensorflow", "tf-multiworker"),
    pytest.param("tensorflow", "horovod", marks=pytest.mark.slow),
    ("mxnet", "mxnet-kvstore"), ("mxnet", "horovod"),
    ("jax", "jax"), ("jax", "jax-distributed"),
]
"""Every (framework, launcher) that runs two devices on this machine's CPU (TensorFlow under
Horovod takes over 10 s)."""


def replica_sums(record, key: str) -> list:
    """``key``'s values over the cell's replicas, rank by rank."""
    return [value for report in rank_reports(record) for value in report[key]]


@pytest.mark.parametrize("framework, launcher", LAUNCHERS)
def test_forward_backward_gives_every_replica_the_same_gradients_from_different_data(
        out_dir, framework, launcher):
    scaling_cli_ok("run", "--framework", framework, "--launcher", launcher, "--devices", 2,
                   "--workload", "cifar10", "--image-size", 8, "--batch-size", 2,
                   "--mode", "forward_backward", "--steps", 1, "--warmup", 0,
                   "--device-type", "cpu", "--timeout", 300, "--out", out_dir)
    [record] = read_records(out_dir)
    assert record["status"] == "ok", record["error"]
    data, gradients = replica_sums(record, "data_sums"), replica_sums(record, "gradient_sums")
    assert len(data) == len(gradients) == 2
    assert data[0] != pytest.approx(data[1], rel=1e-3)
    assert gradients[0] == pytest.approx(gradients[1], rel=1e-5)
