"""Reports that scale: the terminal report stays the same size whatever the run's, fits in 120
columns, and the work that used to scan every row for every row gives what the scan gave
(``bench/report_scale.py`` times it)."""

from __future__ import annotations

import csv
import io
import json
import random
from collections import OrderedDict
from datetime import datetime, timedelta, timezone

import numpy as np
from conftest import recorded_cell, scaling_in_process, write_records

from scaling.report import json_text
from scaling.report.baseline import baselines, nearest_gap_s, started
from scaling.report.columns import CSV_COLUMNS
from scaling.report.curves import baseline_key
from scaling.report.references import point_key
from scaling.report.results_csv import write_csv
from scaling.report.tables import with_scaling
from scaling.report.terminal import TERMINAL_CURVES

ORDER = (("single", 1, 0), ("torchrun", 1, 0), ("torchrun", 2, 0), ("single", 1, 1),
         ("torchrun", 2, 1), ("torchrun", 1, 1), ("single", 1, 2))
"""The quickstart's cells of one workload, in the order its sweep runs them."""
NOISE = ("other processes used 1.00 cores of 2 before the cell; other processes used 1.02 "
         "cores of 2 during the window")


def quickstart(hosts=("vm",), batches=(16,), names=("",)) -> list:
    """The quickstart's 14 records (cifar10 and resnet50 at 32x32 on CPU: single at one device
    three times, torchrun at one and two devices twice; the first repeat times the references),
    copied over ``hosts``, per-device ``batches`` and workload name suffixes (``names``), each
    copy with its own cells, starts a minute apart and figures that move a little."""
    records, start = [], datetime(2024, 3, 4, 9, tzinfo=timezone.utc)
    for copy, (host, batch, name) in enumerate(
            (host, batch, name) for host in hosts for batch in batches for name in names):
        for workload, alone in (("cifar10", 230.0), ("resnet50", 55.0)):
            for launcher, devices, repeat in ORDER:
                moved = 1 + ((copy * 7 + repeat) % 5 - 2) / 100
                ips = alone * moved * (1.0 if launcher == "single" else 0.95) * \
                    (1.7 if devices == 2 else 1)
                record = recorded_cell(devices, ips, batch=batch, repeat=repeat,
                                       workload=workload + name, launcher=launcher,
                                       version="2.14.1+cu130")
                record.update(
                    cell=f"{record['cell']}-{copy}", device_type="cpu", image_size=32,
                    threads_per_device=1, threads_default=True, cpu_cores=2, host=host,
                    hosts=[host] * devices, references=repeat == 0,
                    started_at=start.isoformat(), images_per_sec_ci95=[ips * 0.97, ips * 1.03],
                    noisy=repeat == 1, noise=NOISE if repeat == 1 else None)
                if repeat == 0:
                    record.update(local_step_s=batch / alone, local_step_s_ci95=[
                        batch / alone * 0.98, batch / alone * 1.02])
                if repeat == 0 and devices == 2:
                    record.update(allreduce_time_s=0.01, gradient_bytes=7_000_000,
                                  allreduce_busbw_GBps=1.4, local_step_communicating_s=0.08)
                start += timedelta(minutes=1)
                records.append(record)
    return records


def test_the_quickstart_terminal_report_fits_in_120_columns_and_ends_with_the_summary(
        tmp_path):
    result = scaling_in_process("report", write_records(tmp_path / "out", quickstart()),
                                "--html")
    assert result.returncode == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 120, "\n".join(lines)
    # One line per curve, at its largest device count: single at 1, torchrun at 2.
    curves = [line for line in lines if line.startswith("│") and ", batch 16" in line]
    assert [("single" in line, "1 CPU" in line, "2 CPU" in line) for line in curves] == \
        [(True, True, False), (False, False, True)] * 2
    assert "Every point of every curve, the scaling model, overheads, input verdicts and " \
           "costs: results.csv and the HTML report." in lines
    assert lines[-1] == f"Report: {tmp_path / 'out' / 'report.html'}"
    assert lines[-2].startswith(("Marked:", "Nothing is marked", "Windows:"))


def test_the_terminal_report_does_not_grow_with_the_run(tmp_path):
    """140 curves over 980 records print as many lines as a few curves' worth: the first
    ``TERMINAL_CURVES`` curves, each on one line, and how many are left out."""
    records = quickstart(hosts=("a", "b"), batches=(4, 8, 16, 32, 64, 128, 256),
                         names=("", "-1", "-2", "-3", "-4"))
    assert len(records) == 980
    result = scaling_in_process("report", write_records(tmp_path / "out", records))
    assert result.returncode == 0, result.output
    lines = result.stdout.splitlines()
    assert f"{TERMINAL_CURVES} of 140 curves shown" in lines
    assert len(lines) <= 100 and max(len(line) for line in lines) <= 120
    with open(tmp_path / "out" / "results.csv") as table:
        assert sum(1 for _ in csv.DictReader(table)) == 980


def test_a_failed_larger_count_is_named_beside_the_largest_ok_one(tmp_path):
    records = [recorded_cell(1, 100.0), recorded_cell(2, 180.0),
               recorded_cell(4, 0, status="oom")]
    result = scaling_in_process("report", write_records(tmp_path / "out", records))
    [line] = [line for line in result.stdout.splitlines() if "180.0 (1.80x, 90%)" in line]
    assert "2 GPU" in line and "4: OOM" in line


def test_each_row_s_baseline_gap_and_hosts_are_those_of_all_its_measurements():
    """What the report once found by scanning every measurement of a row's baseline for each
    row, it now looks up (a binary search over the sorted starts): the same figures."""
    rows = with_scaling(quickstart(hosts=("a", "b", "c"), batches=(16, 32)))
    keys = [baseline_key(row) for row in rows]
    found = baselines(rows, baseline_key, keys)
    checked = 0
    for row, key in zip(rows, keys):
        measured = found[key].measurements
        assert row["baseline_hosts"] == sorted({h for m in measured for h in m["hosts"]})
        if any(m["cell"] == row["cell"] for m in measured):
            assert row["baseline_gap_s"] is None
            continue
        assert row["baseline_gap_s"] == min(abs(started(row) - started(m)) for m in measured)
        checked += 1
    assert checked == 3 * 2 * 2 * 4  # every torchrun row of 3 hosts, 2 batches, 2 models


def test_the_nearest_start_is_the_smallest_gap():
    generator = random.Random(46)
    for size in (1, 2, 3, 10, 100):
        starts = tuple(sorted(generator.uniform(0, 1e6) for _ in range(size)))
        for start in [*starts, -5.0, 2e6, *(generator.uniform(-10, 1e6 + 10)
                                              for _ in range(50))]:
            assert nearest_gap_s(start, starts) == min(abs(start - other) for other in starts)
    assert nearest_gap_s(None, (1.0,)) is None and nearest_gap_s(1.0, ()) is None


def test_two_records_share_a_point_exactly_where_their_fields_json_texts_agree():
    values = [1, 1.0, True, "1", None, 0.0, -0.0, 2.5, {}, [], {"a": 1, "b": [2]},
              {"b": [2], "a": 1}, [1, 2], [2, 1], "x"]
    base = recorded_cell(2, 100.0)
    for one in values:
        for other in values:
            same = json.dumps(one, sort_keys=True) == json.dumps(other, sort_keys=True)
            assert (point_key({**base, "options": one}) ==
                    point_key({**base, "options": other})) == same, (one, other)


def test_json_text_is_json_dumps_with_sorted_keys():
    for value in ({"b": [1, 2.5, None, True, "é\n\""], "a": {"d": {}, "c": []}}, "x", 1.5,
                  [{"z": 1, "y": [float("inf")]}], OrderedDict([("b", 1), ("a", 2)])):
        assert json_text(value) == json.dumps(value, sort_keys=True)


def csv_module(rows) -> str:
    """``rows`` as the csv module writes them, lists and objects as JSON text: what
    ``results.csv`` was written with before."""
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({key: json.dumps(value, sort_keys=True)
                         if isinstance(value, (dict, list)) else "" if value is None else value
                         for key, value in row.items()})
    return out.getvalue()


def test_results_csv_is_byte_for_byte_what_the_csv_module_writes(tmp_path):
    rows = with_scaling(quickstart(hosts=("a", "b")))
    awkward = ['a,b', 'say "hi"', "two\nlines", "cr\rhere", "", " spaced ", "é ü", ",",
               '"', "\r\n", 0, -1, 2.5e-7, 1e22, float("nan"), True, False, None,
               np.float64(1.25), np.int64(3), (1, 2), OrderedDict([("b", '"x,y"')]),
               {"a": [1, "q\"uote"]}, [], {}]
    generator = random.Random(7)
    for index, row in enumerate(rows):
        row.update({column: generator.choice(awkward) for column in
                    generator.sample(CSV_COLUMNS, 12) if index % 3})
    write_csv(rows, tmp_path / "results.csv")
    with open(tmp_path / "results.csv", newline="") as written:
        assert written.read() == csv_module(rows)
