"""A cell's id is a hash of what it measures, stable across harness versions."""

from __future__ import annotations

import dataclasses
import json

from scaling.cell import SINCE_DEFAULT, Cell, make_cell

KNOWN = dict(framework="torch", launcher="torchrun", workload="cifar10", devices=2,
             batch_size=8, image_size=32, steps=5, warmup=1, device_type="cpu",
             threads_per_device=1)


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
