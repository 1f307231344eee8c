"""``scaling accept`` on a real two-node Slurm cluster: a run measured while n2 is slowed (its
slurmd, and all it starts, under two fifths of a core; a repeat of its cell on each node)
against a run of the healthy n1. n1 runs ahead of the machine's other work (ten times its
weight), so that the load of other tests moves its figures little: n1 passes, n2 fails and,
measured again on n2 (--confirm), the fail is confirmed; exit 1, a JUnit file CI can read,
JSON. A run against itself passes with exit 0. Bad references and tolerances are one-line
errors."""

from __future__ import annotations

import json
from xml.etree import ElementTree

import pytest
from conftest import read_records, scaling_in_process, write_sweep
from cpugroup import AHEAD_SHARES
from slurmcluster import SlurmCluster, missing_binaries

from test_bad_input import assert_one_line_error
from test_slurm import scaling

SLOW_SHARE = 0.4
"""n2's quota: under half of what n1, ahead, gets, beyond the tolerance of 0.7."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if missing_binaries():
        pytest.skip(f"Slurm is not installed ({', '.join(missing_binaries())} missing)")
    with SlurmCluster(tmp_path_factory.mktemp("slurm"), nodes=2, cpus_per_node=2) as running:
        yield running


def swept(cluster, tmp_path, name, repeats=1, *flags):
    """A one-thread tiny ``single`` cell (no launcher agent to start, on a slowed node least of
    all: what is judged is the node, not the launcher), its first ``repeats`` repeats, with the
    sweep's ``flags``."""
    config = write_sweep(tmp_path / f"{name}-{repeats}.yaml", name=name, min_time_s=3,
                         threads_per_device=1, repeats=repeats,
                         frameworks={"torch": {"launchers": ["single"]}})
    ran = scaling(cluster, "sweep", config, "--out", tmp_path / name, "--backend", "slurm",
                  "--wait", *flags)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return tmp_path / name


@pytest.mark.slow
def test_a_slowed_node_fails_confirmed_and_a_healthy_one_passes(cluster, tmp_path):
    with cluster.grouped("n1", "ahead", shares=AHEAD_SHARES), cluster.slowed("n2", SLOW_SHARE):
        reference = swept(cluster, tmp_path, "healthy", 1, "--sbatch-arg=--nodelist=n1")
        swept(cluster, tmp_path, "slowed", 1, "--sbatch-arg=--nodelist=n1")
        run = swept(cluster, tmp_path, "slowed", 2, "--sbatch-arg=--nodelist=n2", "--resume")
        assert {tuple(r["node_names"]) for r in read_records(run)} == {("n1",), ("n2",)}
        judged = scaling(cluster, "accept", run, "--reference", reference, "--tolerance", 0.7,
                         "--confirm", 1, "--backend", "slurm", "--json", tmp_path / "v.json",
                         "--junit", tmp_path / "junit.xml")
    assert judged.returncode == 1, judged.stdout + judged.stderr
    assert "measuring cifar10 x1 again on n2" in judged.stdout
    verdicts = {v["node"]: v for v in json.loads((tmp_path / "v.json").read_text())}
    assert verdicts["n1"]["verdict"] == "pass" and not verdicts["n1"]["confirmed"]
    assert verdicts["n2"]["verdict"] == "fail" and verdicts["n2"]["confirmed"]
    assert verdicts["n2"]["measurements"] == 2  # its first run and the one --confirm added
    suite = ElementTree.parse(tmp_path / "junit.xml").getroot()
    assert (suite.tag, suite.get("tests"), suite.get("failures")) == ("testsuite", "2", "1")
    [failure] = suite.iter("failure")
    [failed] = [case for case in suite.iter("testcase") if case.find("failure") is not None]
    assert failed.get("name") == "1 device(s) on n2"
    assert failure.get("message").startswith("fail (confirmed):")

    itself = scaling(cluster, "accept", reference, "--reference", reference, "--tolerance", 0.8)
    assert itself.returncode == 0, itself.stdout + itself.stderr
    assert itself.stdout.rstrip().splitlines()[-1] == "1 pass"


def test_an_unknown_reference_and_a_tolerance_outside_0_to_1_are_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    assert_one_line_error(scaling_in_process("accept", run, "--reference", "b300"),
                          "unknown reference 'b300'", "(h100, a100, h200, v100)")
    for tolerance in ("0", "1.5"):
        assert_one_line_error(scaling_in_process("accept", run, "--reference", "h100",
                                                 "--tolerance", tolerance), "--tolerance")


def test_a_point_whose_cells_all_failed_fails_and_two_such_cells_confirm_it():
    from scaling.report.accept import verdict

    crashed = {"status": "crashed", "low": None, "high": None, "images_per_sec": None,
               "records": 1}
    figure = {"images_per_sec": 100.0, "source": "a run", "differs": ""}
    assert verdict(crashed, figure, 0.95)["verdict"] == "fail"
    assert not verdict(crashed, figure, 0.95)["confirmed"]
    assert verdict({**crashed, "records": 2}, figure, 0.95)["confirmed"]
