"""``scaling preflight`` and stragglers on a real 2-node Slurm cluster on this machine, with one
node really slowed: its slurmd, and every process it starts, under a CPU quota."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
from conftest import rank_reports, read_records, write_sweep
from cpugroup import AHEAD_SHARES
from slurmcluster import SlurmCluster, missing_binaries

from scaling.execute.preflight import PREFLIGHT_FILE

SLOW_SHARE = 0.4
"""The slowed node's quota, two fifths of a core, while the other node runs ahead of the
machine's other work (ten times its weight): the fast node gets nearly a core whatever runs
beside, the slowed one at most 0.4, beyond the flag's and the straggler's margins."""
THRESHOLD = 30
"""The two nodes share this machine's two cores with whatever else runs, so the preflight with
neither node slowed flags only at 30% below the fleet's median, beyond what sharing moves."""
PREFLIGHT = ("preflight", "--backend", "slurm", "--nodes", 2, "--device-type", "cpu",
             "--devices", 1, "--threads-per-device", 1, "--threshold", THRESHOLD, "--wait")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if missing_binaries():
        pytest.skip(f"Slurm is not installed ({', '.join(missing_binaries())} missing)")
    with SlurmCluster(tmp_path_factory.mktemp("slurm"), nodes=2) as running:
        yield running


def scaling(cluster, *args):
    return subprocess.run([sys.executable, "-m", "scaling", *map(str, args)],
                          capture_output=True, text=True, env=cluster.env, timeout=900)


@pytest.fixture(scope="module")
def slowed_sweep(cluster, tmp_path_factory):
    """A sweep with ``--preflight`` while n2 is slowed: its output and its folder. The
    preflight the sweep runs first is the one ``scaling preflight`` runs (the same job, judged
    and printed by the same code), so the tests below read its verdict; whether a flagged node
    makes ``scaling preflight`` exit 1 is a test of its own, against a baseline.

    Its two cells, ``single`` (the launcher is not what is checked) at two batch sizes, each
    take a whole node (the node's cores are their threads' default), so that they would run on
    both nodes at once were n2 not kept out."""
    folder = tmp_path_factory.mktemp("slowed-sweep")
    config = write_sweep(folder / "sweep.yaml", frameworks={"torch": {"launchers": ["single"]}},
                         batch_sizes=[2, 4], steps=2, warmup=1)
    with cluster.grouped("n1", "ahead", shares=AHEAD_SHARES), cluster.slowed("n2", SLOW_SHARE):
        swept = scaling(cluster, "sweep", config, "--preflight", "--backend", "slurm", "--wait",
                        "--out", folder / "out")
    assert swept.returncode == 0, swept.stdout + swept.stderr
    return swept, folder / "out"


@pytest.mark.slow
def test_preflight_flags_the_slowed_node_alone(slowed_sweep):
    swept, out = slowed_sweep
    verdict = json.loads((out / PREFLIGHT_FILE).read_text())
    assert (verdict["flagged"], verdict["nodelist"]) == (["n2"], "n1")
    fast, slow = verdict["nodes"]
    assert (fast["host"], slow["host"]) == ("n1", "n2")
    assert slow["flags"] and not fast["flags"]
    for name in ("matmul_tflops", "triad_GBps", "cell_images_per_sec"):
        assert slow["figures"][name]["value"] < fast["figures"][name]["value"]
    assert slow["figures"]["pair_busbw_GBps"] == fast["figures"]["pair_busbw_GBps"]
    assert "--nodelist n1" in swept.stdout and "--exclude n2" in swept.stdout


@pytest.mark.slow
def test_preflight_passes_every_node_and_exits_1_once_one_is_below_its_baseline(cluster,
                                                                                tmp_path):
    # Both nodes ahead of the machine's other work, alike: a neighbour's load, which falls on
    # one node's figures more than the other's, moves neither.
    with cluster.grouped("n1", "ahead", shares=AHEAD_SHARES), \
            cluster.grouped("n2", "ahead", shares=AHEAD_SHARES):
        passed = scaling(cluster, *PREFLIGHT, "--repeats", 2, "--out", tmp_path / "fleet",
                         "--save-baseline", tmp_path / "baseline.json")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    verdict = json.loads((tmp_path / "fleet" / PREFLIGHT_FILE).read_text())
    assert verdict["flagged"] == [] and verdict["nodelist"] == "n1,n2"

    # n1 once had 100 times its memory bandwidth, and both nodes a tenth of their other
    # figures: far enough that sharing the cores between the two checks moves no verdict, and
    # that one repeat of each figure judges as surely as the fleet's check needs two.
    baseline = json.loads((tmp_path / "baseline.json").read_text())
    for node in baseline["nodes"]:
        for name, figure in node["figures"].items():
            figure["value"] *= 100 if (node["host"], name) == ("n1", "triad_GBps") else 0.1
    (tmp_path / "faster.json").write_text(json.dumps(baseline))
    judged = scaling(cluster, *PREFLIGHT, "--repeats", 1, "--baseline",
                     tmp_path / "faster.json", "--out", tmp_path / "judged")
    assert judged.returncode == 1, judged.stdout + judged.stderr
    verdict = json.loads((tmp_path / "judged" / PREFLIGHT_FILE).read_text())
    assert (verdict["flagged"], verdict["nodelist"]) == (["n1"], "n2")
    [n1] = [node for node in verdict["nodes"] if node["host"] == "n1"]
    assert list(n1["flags"]) == ["triad_GBps"] and "below the baseline" in n1["flags"]["triad_GBps"]
    assert "--nodelist n2" in judged.stdout and "--exclude n1" in judged.stdout


@pytest.mark.slow
def test_a_two_node_cell_names_the_slowed_nodes_rank_as_its_straggler(cluster, tmp_path):
    """The straggler is named by its Slurm node: both nodes here share this machine's host
    name, which alone would not say which node was slow."""
    with cluster.grouped("n1", "ahead", shares=AHEAD_SHARES), cluster.slowed("n2", SLOW_SHARE):
        ran = scaling(cluster, "run", "--backend", "slurm", "--nodes", 2, "--devices", 1,
                      "--threads-per-device", 1, "--workload", "cifar10", "--image-size", 32,
                      "--batch-size", 16, "--steps", 4, "--warmup", 1, "--device-type", "cpu",
                      "--wait", "--out", tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    [record] = read_records(tmp_path)
    assert record["straggler_rank"] == 1 and record["rank_skew"] >= 1.2
    assert [node["node"] for node in record["slurm"]["nodes"]] == ["n1", "n2"]
    assert [(r["rank"], r["node"]) for r in rank_reports(record)] == [(0, "n1"), (1, "n2")]
    assert record["straggler_host"] == "n2"
    assert record["straggler"].startswith(f"rank 1 on n2 (host {socket.gethostname()}) took ")


@pytest.mark.slow
def test_a_sweep_with_preflight_keeps_its_cells_off_the_slowed_node(slowed_sweep):
    _, out = slowed_sweep
    records = read_records(out)
    assert sorted(r["batch_size"] for r in records) == [2, 4]
    assert {r["slurm"]["node_list"] for r in records} == {"n1"}
