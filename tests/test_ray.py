"""Sweeps on a real Ray cluster of two nodes on this machine (``--backend ray``): each cell's
ranks in a placement group, one bundle per node; every file of a cell back in OUT through Ray,
from node folders that share nothing; records naming the Ray nodes; a rank killed part way; and
a head that is gone. Cancel, resume and an outage are the backends' contract
(tests/test_backend_contract.py)."""

from __future__ import annotations

import pytest
from conftest import read_records, scaling_cli, write_sweep
from raycluster import RayCluster, missing_ray

from scaling.schema import RECORD_FIELDS


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if missing_ray():
        pytest.skip(missing_ray())
    with RayCluster(nodes=2, cpus_per_node=2) as running:
        yield running


def ray_sweep(cluster, config, out, env=None):
    return scaling_cli("sweep", config, "--out", out, "--backend", "ray", "--address",
                       cluster.address, env=env or cluster.env)


@pytest.mark.slow
def test_torchrun_on_one_and_two_nodes_and_horovod_on_two_name_their_ray_nodes(cluster,
                                                                              tmp_path):
    config = write_sweep(tmp_path / "sweep.yaml",
                         frameworks={"torch": {"launchers": ["torchrun", "horovod"]}},
                         nodes=[1, 2], timeout_s=300)
    out = tmp_path / "out"
    ran = ray_sweep(cluster, config, out)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    records = {(r["launcher"], r["nodes"]): r for r in read_records(out)}
    assert sorted(records) == [("horovod", 1), ("horovod", 2), ("torchrun", 1), ("torchrun", 2)]
    for (launcher, nodes), record in records.items():
        assert record["status"] == "ok", record["error"]
        assert set(record) == set(RECORD_FIELDS) - {"slurm"}
        ray_nodes = record["ray"]["nodes"]
        assert len(ray_nodes) == nodes and record["ray"]["address"] == cluster.address
        assert len({node["node_id"] for node in ray_nodes}) == nodes  # spread over distinct nodes
        assert {node["node_id"] for node in ray_nodes} <= cluster.node_ids()
        cell_dir = out / "cells" / record["cell"]
        # Every rank's report and every node's log came back here, through Ray.
        assert len(list(cell_dir.glob("rank*.json"))) == nodes
        assert {path.name for path in cell_dir.glob("launcher*.log")} == \
            {"launcher.log", *(f"launcher-node{index}.log" for index in range(1, nodes))}
        assert record["log"] == str(cell_dir / "launcher.log")
        # So did each node's fingerprint, which the report compares machines by.
        assert len(record["fingerprint"]) == nodes and all(
            (out / "fingerprints" / f"{name}.json").is_file() for name in record["fingerprint"])


@pytest.mark.slow
def test_a_rank_killed_part_way_ends_its_cell_crashed_with_its_logs(cluster, tmp_path):
    config = write_sweep(tmp_path / "sweep.yaml", nodes=[2], timeout_s=300)
    out = tmp_path / "out"
    ran = ray_sweep(cluster, config, out, env={**cluster.env, "SCALING_FAULT": "crash@1:3"})
    assert ran.returncode == 1, ran.stdout + ran.stderr
    [record] = read_records(out)
    assert record["status"] == "crashed"
    assert record["error"] == "rank 1 killed by SIGKILL"
    # Each node's launcher log came back, node 1's with torchrun's account of its failed rank.
    logs = {path.name: path.read_text() for path in (out / "cells" / record["cell"]).glob("*.log")}
    assert set(logs) == {"launcher.log", "launcher-node1.log"}
    assert "Root Cause" in logs["launcher-node1.log"]


def test_a_stopped_head_exits_3_and_records_nothing(tmp_path):
    if missing_ray():
        pytest.skip(missing_ray())
    with RayCluster(nodes=1, cpus_per_node=1) as gone:
        address = gone.address
    out = tmp_path / "out"
    ran = scaling_cli("sweep", write_sweep(tmp_path / "sweep.yaml"), "--out", out, "--backend",
                      "ray", "--address", address)
    assert ran.returncode == 3, ran.stdout + ran.stderr
    assert ran.stderr.splitlines() == [ran.stderr.strip()]
    assert ran.stderr.startswith(f"Error: could not reach the Ray cluster at {address}")
    assert not (out / "results.jsonl").exists()
