"""The results store under concurrent writers and damage."""

from __future__ import annotations

import json
import multiprocessing

import pytest
from conftest import read_records, scaling_cli, scaling_cli_ok, write_sweep

from scaling.execute.store import ResultStore

WRITERS, RECORDS_EACH = 6, 40


def append_many(out_dir, writer):
    store = ResultStore(out_dir)
    for index in range(RECORDS_EACH):
        # Lines of 200 KB: far beyond what one write is guaranteed to do whole without a lock.
        store.append({"cell": f"{writer}-{index}", "payload": str(writer) * 200_000})


def test_concurrent_writers_lose_and_interleave_nothing(tmp_path):
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=append_many, args=(tmp_path, w)) for w in range(WRITERS)]
    for process in writers:
        process.start()
    for process in writers:
        process.join(120)
        assert process.exitcode == 0
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert sorted(r["cell"] for r in records) == sorted(
        f"{w}-{i}" for w in range(WRITERS) for i in range(RECORDS_EACH))
    for record in records:
        writer = record["cell"].split("-")[0]
        assert record["payload"] == writer * 200_000


def test_a_line_cut_short_by_a_kill_is_dropped_and_overwritten(tmp_path):
    store = ResultStore(tmp_path)
    store.append({"cell": "a", "status": "ok"})
    with open(store.path, "a") as results:
        results.write('{"cell": "b", "sta')
    assert list(store.done()) == ["a"]
    store.append({"cell": "b", "status": "ok"})
    assert [r["cell"] for r in store.records()] == ["a", "b"]


def damage_line(path, number):
    lines = path.read_text().splitlines(keepends=True)
    lines[number - 1] = lines[number - 1][: len(lines[number - 1]) // 2] + "\n"
    path.write_text("".join(lines))


@pytest.mark.slow
def test_a_damaged_line_is_skipped_with_a_warning_and_resume_reruns_only_its_cell(
        tmp_path, out_dir):
    config = write_sweep(tmp_path / "sweep.yaml", batch_sizes=[2, 4])
    scaling_cli_ok("sweep", config, "--out", out_dir)
    before = read_records(out_dir)
    damaged_cell = before[0]["cell"]
    damage_line(out_dir / "results.jsonl", 1)

    report = scaling_cli("report", out_dir)
    assert report.returncode == 0, report.stderr
    assert "Traceback" not in report.stderr
    assert f"{out_dir / 'results.jsonl'} line 1 is damaged" in report.stderr

    resumed = scaling_cli_ok("sweep", config, "--out", out_dir, "--resume")
    assert "Traceback" not in resumed.stderr
    assert "2 cells, 1 already recorded" in resumed.stdout
    recorded = ResultStore(out_dir).records()
    assert [r["cell"] for r in recorded] == [before[1]["cell"], damaged_cell]
    assert (out_dir / "cells" / damaged_cell / "record.json").exists()
