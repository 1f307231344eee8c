"""The MNIST multilayer perceptron of the CPU-versus-GPU reference runs in every framework, on
one-channel 28x28 inputs with Adam, with the same parameter count."""

from __future__ import annotations

import pytest

from conftest import read_records, scaling_cli_ok


@pytest.mark.parametrize("framework", [
    pytest.param("torch", marks=pytest.mark.slow),
    pytest.param("tensorflow", marks=pytest.mark.slow),
    "mxnet",
])
def test_mnist_mlp_trains_in_every_framework(out_dir, framework):
    scaling_cli_ok("run", "--framework", framework, "--workload", "mnist_mlp", "--batch-size",
                   16, "--steps", 1, "--warmup", 1, "--out", out_dir)
    [record] = read_records(out_dir)
    assert record["status"] == "ok", record["error"]
    assert record["image_size"] == 28 and record["params"] == 2_797_010
