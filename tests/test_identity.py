"""A cell's id is a hash of what it measures, stable across harness versions."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from scaling.cell import SINCE_DEFAULT, Cell, make_cell
from scaling.frameworks import FRAMEWORKS
from scaling.workers.collective_env import exactly, tunable

KNOWN = dict(framework="torch", launcher="torchrun", workload="cifar10", devices=2,
             batch_size=8, image_size=32, steps=5, warmup=1, device_type="cpu",
             threads_per_device=1)


@pytest.fixture(autouse=True)
def no_collective_env(monkeypatch):
    """Cells made here take none of the collectives' settings of the environment the tests run
    in: a known cell's id is the id it has with none."""
    for name in [name for name in os.environ if tunable(name)]:
        monkeypatch.delenv(name)


def test_the_id_of_a_known_cell_never_changes():
    assert make_cell(**KNOWN).cell_id == "6f76d7ebda8dbfd3"


def test_the_timeout_is_not_part_of_the_identity():
    assert make_cell(**KNOWN, timeout_s=5).cell_id == make_cell(**KNOWN).cell_id


def test_a_field_added_with_a_default_keeps_older_ids():
    Later = dataclasses.make_dataclass(
        "Later", [("later_field", float, dataclasses.field(
            default=0.0, metadata={"identity": SINCE_DEFAULT}))],
        bases=(Cell,), frozen=True)
    old = make_cell(**KNOWN)
    assert Later(**old.to_dict()).cell_id == old.cell_id
    assert Later(**{**old.to_dict(), "later_field": 5.0}).cell_id != old.cell_id


def test_min_time_keeps_older_ids_at_its_default():
    assert make_cell(**KNOWN, min_time_s=0).cell_id == "6f76d7ebda8dbfd3"
    assert make_cell(**KNOWN, min_time_s=2).cell_id != "6f76d7ebda8dbfd3"


def test_the_mode_keeps_train_cells_ids_and_tells_other_modes_apart():
    assert make_cell(**KNOWN, mode="train").cell_id == "6f76d7ebda8dbfd3"
    assert make_cell(**KNOWN, mode="forward").cell_id != "6f76d7ebda8dbfd3"


def test_a_cell_read_back_from_its_json_keeps_its_id():
    # Slurm tasks and max-batch resumes rebuild cells from cell.json, where tuples are lists.
    for cell in (make_cell(**KNOWN), make_cell(**KNOWN, purpose="allreduce", sizes=[4096])):
        again = Cell(**json.loads(json.dumps(cell.to_dict())))
        assert again.cell_id == cell.cell_id and again == cell
    assert make_cell(**KNOWN, sizes=[4096]).cell_id != "6f76d7ebda8dbfd3"


FUSION = "HOROVOD_FUSION_THRESHOLD"


def test_two_collective_environments_are_two_cells_and_none_keeps_older_ids():
    plain = make_cell(**KNOWN, collective_env={})
    small, large = (make_cell(**KNOWN, collective_env={FUSION: size}) for size in ("0", "1048576"))
    assert plain.cell_id == "6f76d7ebda8dbfd3"
    assert len({plain.cell_id, small.cell_id, large.cell_id}) == 3
    assert small.collective_env == {FUSION: "0"}
    again = Cell(**json.loads(json.dumps(small.to_dict())))
    assert again.cell_id == small.cell_id and again == small


def test_the_cell_takes_the_tunable_environment_of_the_harness(monkeypatch):
    monkeypatch.setenv("NCCL_ALGO", "Ring")
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    # Logging, what the harness sets per rank, and Terraform's TF_ names are not captured.
    for name, value in [("NCCL_DEBUG", "INFO"), ("TF_CPP_MIN_LOG_LEVEL", "3"),
                        ("HOROVOD_RANK", "1"), ("MXNET_ENGINE_TYPE", "NaiveEngine"),
                        ("TF_CONFIG", "{}"), ("TF_VAR_region", "eu"), ("PATH", "/bin")]:
        monkeypatch.setenv(name, value)
    cell = make_cell(**KNOWN)
    assert cell.collective_env == {"NCCL_ALGO": "Ring", "TF_ENABLE_ONEDNN_OPTS": "0"}
    assert cell.cell_id != "6f76d7ebda8dbfd3"


def test_what_the_frameworks_set_for_their_workers_is_never_captured():
    assert not [name for framework in FRAMEWORKS.values() for name in framework.env
                if tunable(name)]


def test_workers_get_exactly_the_cells_collective_environment():
    node = {"PATH": "/bin", "NCCL_ALGO": "Tree", "NCCL_DEBUG": "INFO", "HOROVOD_RANK": "0",
            FUSION: "0"}
    assert exactly(node, {"NCCL_PROTO": "LL", FUSION: "1048576"}) == {
        "PATH": "/bin", "NCCL_DEBUG": "INFO", "HOROVOD_RANK": "0", "NCCL_PROTO": "LL",
        FUSION: "1048576"}
