"""Adding a launcher is one module and its registration: no core file changes.

The launcher below starts PyTorch workers without torchrun: the harness's own spawner gives
each process its rank, and torch's env:// rendezvous meets on the placement's port. The cell
still gets the shared timed loop, the rank reports and the record.
"""

from __future__ import annotations

from typing import Dict, List

import pytest
from click.testing import CliRunner
from conftest import check_images_per_sec, rank_reports, scaling_cli_ok

from scaling.cell import make_cell
from scaling.cli import cli
from scaling.errors import ScalingError
from scaling.execute.run import run_and_record
from scaling.execute.store import ResultStore
from scaling.launchers import LAUNCHERS, Launcher, register_launcher, thread_env, worker_argv


@pytest.fixture(scope="module")
def spawn_launcher():
    @register_launcher
    class TorchSpawn(Launcher):
        name = "torch-spawn"
        frameworks = ("torch",)
        data_parallel = "ddp"  # the torch workers build DistributedDataParallel

        def command(self, cell, placement, cell_dir: str, python: str) -> List[str]:
            return [python, "-m", "scaling.workers.spawn",
                    "--workers", ",".join(placement.rank_endpoints()),
                    "--processes", str(placement.ranks_per_host), "--",
                    *worker_argv(python, cell, cell_dir)]

        def env(self, cell, placement) -> Dict[str, str]:
            return {**thread_env(cell.threads_per_device),
                    "MASTER_ADDR": placement.rendezvous_host,
                    "MASTER_PORT": str(placement.rendezvous_port)}

    yield LAUNCHERS["torch-spawn"]
    del LAUNCHERS["torch-spawn"]


@pytest.mark.slow
def test_a_launcher_registered_from_outside_runs_a_real_cell(spawn_launcher, out_dir):
    cell = make_cell(framework="torch", launcher="torch-spawn", workload="cifar10", devices=2,
                     batch_size=4, image_size=16, steps=3, warmup=1, device_type="cpu",
                     timeout_s=120)
    record = run_and_record(cell, out_dir)
    assert record["status"] == "ok", record["error"]
    assert record["launcher"] == "torch-spawn"
    reports = rank_reports(record)
    assert sorted(r["rank"] for r in reports) == [0, 1]
    assert all(r["world_size"] == 2 for r in reports)
    check_images_per_sec(record, 4 * 2 * 3)
    assert ResultStore(out_dir).done()[cell.cell_id]["status"] == "ok"


def test_a_launcher_refuses_frameworks_it_does_not_start(spawn_launcher):
    with pytest.raises(ScalingError, match="does not start tensorflow; tensorflow launchers: "
                                           "horovod, single, tf-mirrored, tf-multiworker"):
        make_cell(framework="tensorflow", launcher="torch-spawn", workload="cifar10",
                  devices=1, batch_size=4, device_type="cpu")


def test_registering_a_name_twice_is_refused(spawn_launcher):
    with pytest.raises(ValueError, match="registered twice"):
        register_launcher(type(spawn_launcher))


@pytest.mark.slow
def test_a_framework_without_launcher_runs_under_its_default(out_dir):
    scaling_cli_ok("run", "--framework", "tensorflow", "--workload", "cifar10",
                   "--image-size", 16, "--batch-size", 4, "--steps", 2, "--warmup", 1,
                   "--device-type", "cpu", "--out", out_dir)
    [record] = ResultStore(out_dir).records()
    assert (record["launcher"], record["status"]) == ("tf-mirrored", "ok")


def test_a_launcher_must_name_its_data_parallel_mechanism():
    class Nameless(Launcher):
        name = "nameless"
        frameworks = ("torch",)

    with pytest.raises(ValueError, match="launcher 'nameless' names no data_parallel mechanism"):
        register_launcher(Nameless)
    assert "nameless" not in LAUNCHERS


def test_scaling_devices_lists_the_packages_each_framework_and_launcher_registers():
    """`scaling devices` shows, per interpreter, the versions of the distributions that the
    registry entries name: the core names none of them."""
    listing = CliRunner().invoke(cli, ["devices"], terminal_width=200)
    assert listing.exit_code == 0, listing.output
    for package in ("torch", "torchvision", "jax", "flax", "optax", "mxnet", "numpy"):
        assert f" {package} " in listing.output, package
