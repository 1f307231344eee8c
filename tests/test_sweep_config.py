"""Sweep files expand to cells; each cell has a stable identity."""

from __future__ import annotations

from pathlib import Path

from scaling.hardware import cpu_cores
from scaling.sweep import device_counts, expand, load_sweep

REPO = Path(__file__).resolve().parents[1]


def test_the_quickstart_shape_expands_each_curve_between_its_baselines(tmp_path):
    config = tmp_path / "quick.yaml"
    config.write_text("""
name: quickstart
device_type: cpu
frameworks:
  torch: {launchers: [torchrun]}
workloads: [cifar10, resnet50]
devices: [2, 1]
batch_sizes: [16, 32]
image_size: 64
steps: 20
warmup: 5
repeats: 2
timeout_s: 600
""")
    cells = expand(load_sweep(config))
    baselines = [c for c in cells if c.launcher == "single"]
    curves = [c for c in cells if c.launcher != "single"]
    assert {c.devices for c in baselines} == {1}
    assert len(baselines) == 2 * 2 * 3  # workloads x batches x (repeats + 1)
    assert len(curves) == 2 * 2 * 2 * 2
    assert cells[0].launcher == cells[-1].launcher == "single"
    assert {c.launcher for c in curves} == {"torchrun"}
    assert {c.image_size for c in cells} == {64}
    assert len({c.cell_id for c in cells}) == len(cells)


def test_cell_identity_ignores_the_timeout_but_not_the_batch(tmp_path):
    cell = expand(load_sweep(REPO / "configs" / "quickstart.yaml"))[0]
    assert cell.with_changes(timeout_s=5).cell_id == cell.cell_id
    assert cell.with_changes(batch_size=cell.batch_size + 1).cell_id != cell.cell_id


def test_all_devices_means_powers_of_two_up_to_every_device():
    assert device_counts("all", "cpu")[0] == 1
    assert device_counts("all", "cpu")[-1] == cpu_cores()
    assert device_counts([4, 1, 2, 2], "cpu") == [1, 2, 4]


def test_quickstart_config_is_valid():
    spec = load_sweep(REPO / "configs" / "quickstart.yaml")
    assert spec.name == "quickstart"
    assert expand(spec)


def test_the_frameworks_config_compares_all_four_frameworks_on_the_same_workloads():
    spec = load_sweep(REPO / "configs" / "frameworks.yaml")
    assert set(spec.frameworks) == {"torch", "tensorflow", "mxnet", "jax"}
    cells = expand(spec, cores=16)  # a node with a core for each of its 8 devices
    for framework in spec.frameworks:
        assert {c.workload for c in cells if c.framework == framework} == set(spec.workloads)
