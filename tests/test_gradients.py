"""Every launcher aggregates the gradients in ``forward_backward``: two replicas, each on its own
batch, end one step holding the same gradients.

Each rank report carries, per replica its process drives, ``data_sums`` (the sum of the
replica's input images) and ``gradient_sums`` (the sum of every element of its gradients after
the last step). Different batches give different local gradients, so equal gradient sums on
different data show that the step summed or averaged them across the replicas.

The cells of every launcher run in one sweep (TensorFlow under Horovod, which is slow, in its
own), which times no references after the window: only the fingerprints are read.
"""

from __future__ import annotations

import pytest

from conftest import rank_reports, read_records, scaling_cli, write_sweep

FAST = [
    ("torch", "torchrun"), ("torch", "horovod"),
    ("tensorflow", "tf-mirrored"), ("tensorflow", "tf-multiworker"),
    ("mxnet", "mxnet-kvstore"), ("mxnet", "horovod"),
    ("jax", "jax"), ("jax", "jax-distributed"),
]
SLOW = [("tensorflow", "horovod")]
"""TensorFlow under Horovod takes over 10 s."""
LAUNCHERS = FAST + [pytest.param(*pair, marks=pytest.mark.slow) for pair in SLOW]
"""Every (framework, launcher) that runs two devices on this machine's CPU."""


def replica_sums(record, key: str) -> list:
    """``key``'s values over the cell's replicas, rank by rank."""
    return [value for report in rank_reports(record) for value in report[key]]


def sweep_records(folder, pairs) -> tuple:
    """One sweep of a ``forward_backward`` cell on two CPU devices under each (framework,
    launcher) of ``pairs``: the records by (framework, launcher), and the sweep's error output
    (a cell that did not end ok makes it exit 1)."""
    frameworks = {}
    for framework, launcher in pairs:
        frameworks.setdefault(framework, {"launchers": []})["launchers"].append(launcher)
    folder.mkdir(parents=True, exist_ok=True)
    sweep = write_sweep(folder / "sweep.yaml", frameworks=frameworks, devices=[2],
                        image_size=8, batch_sizes=[2], modes=["forward_backward"], steps=1,
                        warmup=0, timeout_s=300, references="none")
    result = scaling_cli("sweep", sweep, "--out", folder / "out", timeout=300 * len(pairs) + 300)
    records = read_records(folder / "out") if (folder / "out" / "results.jsonl").exists() \
        else []
    return {(r["framework"], r["launcher"]): r for r in records}, result.stderr


@pytest.fixture(scope="module")
def gradient_cells(tmp_path_factory):
    """The record of a (framework, launcher): the sweep of every fast one runs at the first
    that needs it, a slow one's own sweep at its test."""
    swept = {}

    def record_of(framework, launcher):
        pair = (framework, launcher)
        if pair not in swept:
            pairs = FAST if pair in FAST else [pair]
            records, stderr = sweep_records(tmp_path_factory.mktemp("gradients"), pairs)
            swept.update({p: (records.get(p), stderr) for p in pairs})
        record, stderr = swept[pair]
        assert record is not None, stderr
        return record

    return record_of


@pytest.mark.parametrize("framework, launcher", LAUNCHERS)
def test_forward_backward_gives_every_replica_the_same_gradients_from_different_data(
        gradient_cells, framework, launcher):
    record = gradient_cells(framework, launcher)
    assert record["status"] == "ok", record["error"]
    data, gradients = replica_sums(record, "data_sums"), replica_sums(record, "gradient_sums")
    assert len(data) == len(gradients) == 2
    assert data[0] != pytest.approx(data[1], rel=1e-3)
    assert gradients[0] == pytest.approx(gradients[1], rel=1e-5)
