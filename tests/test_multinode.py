"""A cell over several nodes: the same command on each node, a rendezvous, one record.

Two "nodes" here are two harness processes on this machine sharing one output folder, as
nodes share one over a network file system.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import check_images_per_sec, rank_reports, read_records
from scaling.placement import free_port_block


@pytest.mark.slow
def test_two_nodes_make_one_record_that_counts_both_nodes_images(out_dir):
    port = free_port_block(1)
    nodes = [subprocess.Popen(
        [sys.executable, "-m", "scaling", "run", "--workload", "cifar10", "--devices", "1",
         "--threads-per-device", "1", "--batch-size", "4", "--image-size", "16", "--steps", "3",
         "--warmup", "1", "--device-type", "cpu", "--nodes", "2", "--node-rank", str(rank),
         "--rendezvous", f"127.0.0.1:{port}", "--timeout", "180", "--out", str(out_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    outputs = [node.communicate(timeout=300) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs
    assert "node 1: this node's ranks ended ok; node 0 records the cell" in outputs[1][0]

    [record] = read_records(out_dir)
    assert record["status"] == "ok", record["error"]
    assert (record["nodes"], record["total_devices"]) == (2, 2)
    reports = rank_reports(record)
    assert sorted(r["rank"] for r in reports) == [0, 1]
    check_images_per_sec(record, 4 * 3 * 2)
    # each node noted its fingerprint before its ranks started; both "nodes" are this machine
    cell_dir = out_dir / "cells" / record["cell"]
    assert sorted(path.name for path in cell_dir.glob("fingerprint-node*.json")) == \
        ["fingerprint-node0.json", "fingerprint-node1.json"]
    [name, same] = record["fingerprint"]
    assert same == name and (out_dir / "fingerprints" / f"{name}.json").exists()
    assert len(record["rank_step_s"]) == 2 and record["straggler_host"] == record["host"]
