"""Each node's fingerprint (versions, clocks, topology, CPU, container, collective environment),
stored once and referenced by hash; stragglers among a cell's ranks."""

from __future__ import annotations

import json
import os
import shutil
import socket

import pytest
from conftest import recorded_cell, scaling_in_process, write_records

from scaling.execute import fingerprint
from scaling.execute.aggregate import stragglers
from scaling.report.html import render_html
from scaling.report.provenance import provenance
from scaling.report.tables import with_scaling
from scaling.report.terminal import curve_ends_table
from scaling.workers.common import node_name


class MockNvmlError(Exception):
    """The mock's ``NVMLError``."""


class MockNvml:
    """A MOCK of ``pynvml``: no NVIDIA GPU or driver exists on this machine, so this replays
    NVML's answers for a node of H100 SXM GPUs (driver 550.54.15, CUDA 12.4). GPU 0 runs
    normally, GPU 1 is idle and held at its power cap with a hardware slowdown, GPU 2 is in MIG
    mode and gives no application clocks (as MIG GPUs answer NOT_SUPPORTED)."""

    NVMLError = MockNvmlError
    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2
    ANSWERS = [
        {"name": b"NVIDIA H100 80GB HBM3", "max": {1: 1980, 2: 2619}, "app": {1: 1980, 2: 2619},
         "power_mw": 700000, "reasons": 0x0, "mig": [0, 0]},
        {"name": "NVIDIA H100 80GB HBM3", "max": {1: 1980, 2: 2619}, "app": {1: 1980, 2: 2619},
         "power_mw": 500000, "reasons": 0x1 | 0x4 | 0x8, "mig": [0, 0]},
        {"name": "NVIDIA H100 80GB HBM3", "max": {1: 1980, 2: 2619}, "app": None,
         "power_mw": 700000, "reasons": 0x1, "mig": [1, 1]},
    ]

    def nvmlSystemGetDriverVersion(self):
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12040

    def nvmlDeviceGetCount(self):
        return len(self.ANSWERS)

    def nvmlDeviceGetHandleByIndex(self, index):
        return self.ANSWERS[index]

    def nvmlDeviceGetName(self, handle):
        return handle["name"]

    def nvmlDeviceGetMaxClockInfo(self, handle, clock):
        return handle["max"][clock]

    def nvmlDeviceGetApplicationsClock(self, handle, clock):
        if handle["app"] is None:
            raise MockNvmlError("Not Supported")
        return handle["app"][clock]

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return handle["power_mw"]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return handle["reasons"]

    def nvmlDeviceGetMigMode(self, handle):
        return handle["mig"]


@pytest.fixture(scope="module")
def gpu_node():
    """This node's fingerprint with the GPU answers of :class:`MockNvml`."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fingerprint, "open_nvml", MockNvml)
        return fingerprint.gather("/nonexistent/python", {"NCCL_ALGO": "Ring"})


def test_the_gpu_fields_come_from_nvml(gpu_node):
    gpu = gpu_node["gpu"]
    assert (gpu["driver"], gpu["cuda_driver"]) == ("550.54.15", "12.4")
    normal, capped, mig = gpu["devices"]
    assert normal == {
        "name": "NVIDIA H100 80GB HBM3", "sm_clock_max_mhz": 1980, "memory_clock_max_mhz": 2619,
        "sm_clock_applications_mhz": 1980, "memory_clock_applications_mhz": 2619,
        "power_limit_w": 700.0, "throttle_reasons": [], "mig_mode": False}
    assert capped["power_limit_w"] == 500.0
    assert capped["throttle_reasons"] == ["sw_power_cap", "hw_slowdown"]  # idle left out
    assert mig["mig_mode"] is True and mig["sm_clock_applications_mhz"] is None
    assert gpu_node["collective_env"] == {"NCCL_ALGO": "Ring"}
    assert gpu_node["libraries"] is None  # an interpreter that cannot run
    assert gpu_node["cpu"]["model"] and gpu_node["kernel"].startswith("Linux")


def test_a_multi_gpu_cell_on_mig_instances_is_refused_in_one_line(gpu_node):
    reason = fingerprint.mig_refusal(gpu_node, [0, 1, 2], 3)
    assert reason.startswith("MIG mode is on for GPU 2 of ")
    assert reason.endswith("(NCCL does not support communication between MIG instances)")
    assert "\n" not in reason
    assert fingerprint.mig_refusal(gpu_node, [2], 1) is None  # one GPU: no communication
    assert fingerprint.mig_refusal(gpu_node, [0, 1], 2) is None
    assert fingerprint.mig_refusal({"gpu": None, "host": "h"}, [], 4) is None  # a CPU node


def test_a_fingerprint_is_stored_once_by_its_hash(tmp_path, gpu_node):
    name = fingerprint.store(tmp_path, gpu_node)
    assert fingerprint.store(tmp_path, json.loads(json.dumps(gpu_node))) == name
    assert [path.name for path in (tmp_path / "fingerprints").iterdir()] == [f"{name}.json"]
    changed = {**gpu_node, "collective_env": {"NCCL_ALGO": "Tree"}}
    assert fingerprint.store(tmp_path, changed) != name
    assert len(list((tmp_path / "fingerprints").iterdir())) == 2


def test_the_container_is_named_where_the_cell_runs_in_one(tmp_path):
    assert fingerprint.container({"APPTAINER_CONTAINER": "/images/pytorch.sif"}, tmp_path) == \
        {"runtime": "apptainer", "image": "/images/pytorch.sif"}
    assert fingerprint.container({}, tmp_path) is None
    (tmp_path / "run").mkdir()
    (tmp_path / "run/.containerenv").write_text(
        'engine="podman-4.9.3"\nname="bench"\nimage="nvcr.io/nvidia/pytorch:24.05-py3"\n'
        'imageid="5c1f"\n')
    assert fingerprint.container({}, tmp_path) == {
        "runtime": "podman", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "image_id": "5c1f"}


def test_system_libraries_are_read_from_their_file_names(tmp_path):
    for name in ("libnccl.so.2", "libnccl.so.2.21.5", "libcudnn.so.9", "libcudnn.so.9.1.0"):
        (tmp_path / name).touch()
    (tmp_path / "version.json").write_text('{"cuda": {"name": "CUDA SDK", "version": "12.4.1"}}')
    assert fingerprint.system_libraries([str(tmp_path)], str(tmp_path / "version.json")) == \
        {"nccl": "2.21.5", "cudnn": "9.1.0", "cuda": "12.4.1"}


def fingerprinted_run(out_dir, node, records):
    """``records`` in ``out_dir``, each referencing ``node``'s fingerprint stored there."""
    name = fingerprint.store(out_dir, node)
    return write_records(out_dir, [{**record, "fingerprint": [name]} for record in records])


RECORDED = [recorded_cell(1, 100.0), recorded_cell(2, 190.0)]


def test_compare_names_the_fingerprint_field_that_changed(tmp_path, gpu_node):
    base = fingerprinted_run(tmp_path / "base", gpu_node, RECORDED)
    shutil.copytree(base, tmp_path / "same")
    devices = [dict(device) for device in gpu_node["gpu"]["devices"]]
    devices[0]["power_limit_w"] = 400.0
    new = fingerprinted_run(tmp_path / "new", {**gpu_node, "gpu": {**gpu_node["gpu"],
                                                                   "devices": devices}},
                            RECORDED)
    result = scaling_in_process("compare", base, new)
    assert result.returncode == 0, result.output
    assert "fingerprints differ: gpu.devices.0.power_limit_w\n" in result.stdout
    assert "fingerprints differ" not in \
        scaling_in_process("compare", base, tmp_path / "same").stdout


def test_the_provenance_lists_the_fingerprints_and_how_nodes_differ(tmp_path, gpu_node):
    other = {**gpu_node, "host": "node2", "gpu": {**gpu_node["gpu"], "driver": "535.104.05"}}
    records = [{**recorded_cell(2, 190.0), "fingerprint": [fingerprint.store(tmp_path, gpu_node),
                                                          fingerprint.store(tmp_path, other)]}]
    found = provenance(tmp_path, records)
    assert sorted(entry["host"] for entry in found["fingerprints"]) == \
        sorted([gpu_node["host"], "node2"])
    assert "3x NVIDIA H100 80GB HBM3" in found["fingerprints"][0]["summary"]
    assert found["fingerprint_differences"] == ["gpu.driver"]  # host names aside
    page = render_html(tmp_path, with_scaling(records), records)
    assert "fingerprints differ: gpu.driver" in page
    assert f'href="fingerprints/{found["fingerprints"][0]["hash"]}.json"' in page


def rank_report(rank, step, local=None, host="node1"):
    """A rank report's fields that straggler detection reads."""
    return {"rank": rank, "host": host, "step_time_median_s": step,
            "local_step_chunks": local}


def test_the_slowest_rank_by_its_local_step_is_the_straggler():
    """In the window every rank waits for the slowest, so step times agree; the local steps
    (nothing aggregated) show rank 2 at 1.5x the median."""
    reports = [rank_report(0, 0.101, [0.080, 0.082]), rank_report(1, 0.100, [0.081, 0.079]),
               rank_report(2, 0.102, [0.120, 0.122], host="node2"),
               rank_report(3, 0.101, [0.078, 0.080], host="node2")]
    found = stragglers(reports)
    assert found["rank_step_s"] == [0.101, 0.100, 0.102, 0.101]
    assert found["rank_local_step_s"] == pytest.approx([0.081, 0.080, 0.121, 0.079])
    assert (found["straggler_rank"], found["straggler_host"]) == (2, "node2")
    assert found["rank_skew"] == pytest.approx(0.121 / 0.0805)
    assert found["straggler"] == "rank 2 on node2 took 1.50x the ranks' median local step " \
                                 "(0.121 s)"


def test_the_straggler_is_named_by_its_node_and_by_its_host_where_they_differ():
    """Nodes that share a host name (VMs cloned alike, containers) are told apart by the node
    name their backend gave each rank's report; a report without one names its host."""
    same_host = [{**rank_report(0, 0.100, [0.080], host="vm"), "node": "n1"},
                 {**rank_report(1, 0.100, [0.137], host="vm"), "node": "n2"}]
    found = stragglers(same_host)
    assert (found["straggler_rank"], found["straggler_host"]) == (1, "n2")
    assert found["straggler"] == "rank 1 on n2 (host vm) took 1.26x the ranks' median local " \
                                 "step (0.137 s)"
    named_alike = [{**report, "node": report["host"]} for report in same_host]
    assert stragglers(named_alike)["straggler"].startswith("rank 1 on vm took ")
    unnamed = stragglers([rank_report(0, 0.100, [0.080]), rank_report(1, 0.1, [0.137])])
    assert unnamed["straggler_host"] == "node1"
    assert unnamed["straggler"].startswith("rank 1 on node1 took ")


def test_a_rank_names_its_node_as_its_backend_does_else_by_its_host_name():
    assert node_name({"SLURMD_NODENAME": "n2"}) == "n2"
    assert node_name({"SCALING_NODE_NAME": "ray-7", "SLURMD_NODENAME": "n2"}) == "ray-7"
    assert node_name({"SLURMD_NODENAME": ""}) == node_name({}) == socket.gethostname()


def test_without_local_steps_the_step_times_judge_and_small_skews_pass():
    found = stragglers([rank_report(1, 0.110), rank_report(0, 0.100)])
    assert found["rank_step_s"] == [0.100, 0.110] and found["rank_local_step_s"] is None
    assert found["straggler_rank"] == 1 and found["rank_skew"] == pytest.approx(0.110 / 0.105)
    assert found["straggler"] is None
    one = stragglers([rank_report(0, 0.1)])
    assert one["rank_step_s"] == [0.1] and one["rank_skew"] is one["straggler"] is None


def test_a_straggler_cell_is_marked_in_the_table_and_the_report(tmp_path):
    reason = "rank 1 on node2 took 1.40x the ranks' median local step (0.140 s)"
    records = [recorded_cell(1, 100.0, launcher="single"),
               {**recorded_cell(2, 150.0), "straggler": reason, "rank_skew": 1.4}]
    rows = with_scaling(records)
    _, notes = curve_ends_table(rows)
    assert any(note.startswith("^ ") for note in notes)
    assert reason in " ".join(" ".join(notes).split())
    page = render_html(tmp_path, rows, records)
    assert f'data-straggler="{reason}"' in page.replace("&#39;", "'")
    assert '<li class="straggler"><b>^</b>' in page


def test_the_topology_is_plain_text_without_the_terminal_underline(tmp_path, monkeypatch):
    """A MOCK ``nvidia-smi`` (no driver exists here) that prints what ``nvidia-smi topo -m``
    printed on an H100: its header underlined with terminal escapes."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nprintf '\\033[4mGPU0\\tCPU Affinity\\tNUMA Affinity\\033[0m\\n"
                   "GPU0\\t X \\t0-15\\t0\\n'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert fingerprint.topology() == "GPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-15\t0"
