"""An installed harness, not the checkout: ``pip install .`` (not editable) into a new
virtualenv renders its Slurm batch script from package data, submits it, and the array task
runs the cell from the installed copy."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import read_records
from slurmcluster import SlurmCluster, missing_binaries

ROOT = Path(__file__).resolve().parents[1]


def install(tmp_path: Path) -> Path:
    """A new virtualenv with the harness installed from a copy of the source (the build
    writes nothing into the checkout); its dependencies, and torch for the worker, come from
    this environment's site-packages through a ``.pth`` file, without an index."""
    source = tmp_path / "source"
    for name in ("scaling", "workloads"):
        shutil.copytree(ROOT / name, source / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    [packages] = list(venv.glob("lib/python*/site-packages"))
    (packages / "harness-deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    installed = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--no-index",
         "--no-build-isolation", str(source)], capture_output=True, text=True, cwd=tmp_path)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    imported = subprocess.run([str(venv / "bin" / "python"), "-c",
                               "import scaling; print(scaling.__file__)"],
                              capture_output=True, text=True, cwd=tmp_path, check=True)
    assert imported.stdout.strip() == str(packages / "scaling" / "__init__.py")
    return venv


@pytest.mark.slow
def test_an_installed_harness_submits_a_cell_to_slurm_and_records_it(tmp_path):
    if missing_binaries():
        pytest.skip(f"Slurm is not installed ({', '.join(missing_binaries())} missing)")
    venv = install(tmp_path)
    out = tmp_path / "out"
    with SlurmCluster(tmp_path / "cluster") as cluster:
        ran = subprocess.run(
            [str(venv / "bin" / "scaling"), "run", "--framework", "torch", "--workload",
             "cifar10", "--image-size", "16", "--batch-size", "4", "--steps", "3", "--warmup",
             "1", "--device-type", "cpu", "--backend", "slurm", "--wait", "--out", str(out)],
            capture_output=True, text=True, env=cluster.env, cwd=tmp_path, timeout=600)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    [script] = (out / "slurm").glob("*.sbatch")
    [packages] = list(venv.glob("lib/python*/site-packages"))
    assert f"cd {packages}\n" in script.read_text()
    assert f"{venv / 'bin' / 'python'} -m scaling slurm-task" in script.read_text()
    [record] = read_records(out)
    assert record["status"] == "ok", record["error"]
    assert record["images_per_sec"] > 0 and record["slurm"]["job_id"]


def test_the_quickstart_installs_the_extras_of_what_it_runs_and_nothing_else(tmp_path):
    import yaml

    outer_make = {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}
    env = {key: value for key, value in os.environ.items() if key not in outer_make}
    dry = subprocess.run(["make", "--no-print-directory", "-n", "quickstart",
                          f"VENV={tmp_path / 'venv'}", f"MXNET_VENV={tmp_path / 'venv-mxnet'}"],
                         capture_output=True, text=True, cwd=ROOT, env=env, check=True).stdout
    [install] = [line for line in dry.splitlines() if "-c constraints.txt -e '.[" in line]
    extras = set(install.split("'.[")[1].split("]'")[0].split(","))
    config = yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text())
    assert extras == set(config["frameworks"]) | {"plot"} == {"torch", "plot"}
    assert "venv-mxnet" not in dry and "horovod" not in dry
    assert dry.splitlines()[-1].endswith("--plot --html")
