"""``scaling matmul``: the matrix benchmark on CPU, its checked product, records, CSV and plots."""

from __future__ import annotations

import csv
import os

import pytest
from conftest import read_records, scaling_cli_ok, scaling_in_process

from scaling.execute.matmul import MATMUL_COLUMNS, crossover, parse_sizes
from scaling.report.figures import matmul_figures
from scaling.workers.matmul_worker import check_sum, closed_form


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    out = tmp_path_factory.mktemp("matmul") / "out"
    result = scaling_cli_ok("matmul", "--framework", "torch,tensorflow", "--sizes", "10,50,200",
                            "--repeats", 3, "--out", out)
    return out, result


@pytest.mark.slow
def test_records_and_csv_for_every_framework_and_size(measured):
    out, result = measured
    records = read_records(out)
    assert sorted((r["framework"], r["n"]) for r in records) == [
        ("tensorflow", 10), ("tensorflow", 50), ("tensorflow", 200),
        ("torch", 10), ("torch", 50), ("torch", 200)]
    for record in records:
        assert record["kind"] == "matmul" and record["status"] == "ok", record["error"]
        assert len(record["seconds_all"]) == 3
        assert record["seconds"] == sorted(record["seconds_all"])[1]
        assert record["tflops"] == pytest.approx(2 * record["n"] ** 3 / record["seconds"] / 1e12)
    with open(out / "matmul.csv") as table:
        rows = list(csv.DictReader(table))
    assert list(rows[0]) == MATMUL_COLUMNS
    assert [(row["framework"], row["device"], row["n"]) for row in rows][:3] == [
        ("tensorflow", "cpu", "10"), ("tensorflow", "cpu", "50"), ("tensorflow", "cpu", "200")]


@pytest.mark.slow
def test_without_a_gpu_it_says_so_and_draws_the_time_plot(measured):
    out, result = measured
    assert "no GPU on this machine: the matrix benchmark runs on the CPU only" in result.stdout
    assert (out / "matmul-time.png").read_bytes()[:4] == b"\x89PNG"
    assert not (out / "matmul-ratio.png").exists()


def test_a_wrong_product_is_caught(tmp_path):
    env = {**os.environ, "SCALING_MATMUL_FAULT": "wrong-product"}
    scaling_cli_ok("matmul", "--sizes", "50", "--repeats", 1, "--out", tmp_path, env=env)
    [record] = read_records(tmp_path)
    assert record["status"] == "error"
    assert record["error"].startswith("the product is wrong: sum ")


def test_the_closed_form_is_the_sum_of_the_product():
    import numpy

    matrix = numpy.arange(12, dtype=numpy.float64).reshape(3, 4)
    assert closed_form(matrix) == (matrix @ matrix.T).sum()
    check_sum((matrix @ matrix.T).sum(), closed_form(matrix), "float64")
    with pytest.raises(ArithmeticError, match="the product is wrong"):
        check_sum((matrix.T @ matrix).sum() + 1, closed_form(matrix), "float64")


def timing(framework, device, n, seconds):
    return {"framework": framework, "device_type": device, "n": n, "seconds": seconds,
            "status": "ok"}


GPU_AND_CPU = [timing("torch", "cpu", 10, 1e-6), timing("torch", "gpu", 10, 2e-5),
               timing("torch", "cpu", 100, 1e-4), timing("torch", "gpu", 100, 3e-5),
               timing("torch", "cpu", 1000, 1e-2), timing("torch", "gpu", 1000, 1e-4)]
"""Recorded timings of both devices, for what needs a GPU to be measured."""


def test_crossover_is_where_the_gpu_wins_for_good():
    assert crossover(GPU_AND_CPU, "torch") == 100
    assert crossover(GPU_AND_CPU[:2], "torch") is None
    assert crossover([r for r in GPU_AND_CPU if r["device_type"] == "cpu"], "torch") is None


def test_with_both_devices_there_are_both_plots():
    assert [name for name, _ in matmul_figures(GPU_AND_CPU)] == ["matmul-time", "matmul-ratio"]


@pytest.mark.parametrize("args, message", [
    (("--sizes", "ten"), "--sizes takes positive matrix sides such as 10,100,1000, got 'ten'"),
    (("--device-type", "gpu"), "--device-type gpu: this machine has no GPU"),
    (("--framework", "mxnet"), "unknown matmul framework 'mxnet'; valid: torch, tensorflow, jax"),
])
def test_bad_input_is_a_one_line_error(tmp_path, args, message):
    result = scaling_in_process("matmul", *args, "--out", tmp_path)
    assert result.returncode == 2
    assert message in result.stderr


def test_reference_sizes_by_default():
    sizes = parse_sizes(None)
    assert sizes[:5] == [10, 50, 100, 200, 300] and sizes[-2:] == [19000, 20000]
    assert 1000 in sizes and 2000 in sizes and len(sizes) == len(set(sizes))
