"""Several runs in one report: ``scaling report A B --html FILE`` draws every run's curves in one
page, labels each run by name, hosts and date, and sets the runs' machines side by side with
the differences marked; ``scaling export A B --to FILE`` writes every record of both into one
table."""

from __future__ import annotations

import json
import re
import shutil
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import (read_records, recorded_cell, scaling_cli_ok, scaling_in_process,
                      write_records, write_sweep)
from pages import browser, console_messages, grids_of, headless

from scaling.execute.fingerprint import FINGERPRINTS_DIR, gather, store

CURVE = "torch 2.14.1 / torchrun"


def on_host(records, host: str, day: str, fingerprint: str):
    """``records`` as ``host`` recorded them on ``day``, on the node ``fingerprint``."""
    return [{**record, "host": host, "hosts": [host] * record["devices"],
             "started_at": f"{day}T10:0{index}:00+00:00", "fingerprint": [fingerprint]}
            for index, record in enumerate(records)]


def fingerprinted(out_dir: Path, host: str, collective_env=None) -> str:
    """This machine's fingerprint, run with ``collective_env``, stored in ``out_dir`` as the
    node ``host``; its hash."""
    return store(out_dir, {**gather(sys.executable, collective_env or {}), "host": host})


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory):
    """The same curve measured on two hosts a day apart: monday on node-a scales to 1.8x at
    two devices, tuesday on node-b, with NCCL_ALGO=Ring, to 1.5x; tuesday also ran the matrix
    benchmark."""
    root = tmp_path_factory.mktemp("runs")
    monday, tuesday = root / "monday", root / "tuesday"
    monday.mkdir(), tuesday.mkdir()
    write_records(monday, on_host([recorded_cell(1, 100.0), recorded_cell(2, 180.0)],
                                  "node-a", "2024-03-04", fingerprinted(monday, "node-a")))
    matmul = {"cell": "m1000", "kind": "matmul", "purpose": "matmul", "framework": "torch",
              "device_type": "cpu", "n": 1000, "status": "ok", "seconds": 0.01}
    write_records(tuesday, on_host([recorded_cell(1, 100.0), recorded_cell(2, 150.0)],
                                   "node-b", "2024-03-05",
                                   fingerprinted(tuesday, "node-b", {"NCCL_ALGO": "Ring"}))
                  + [matmul])
    return monday, tuesday


@pytest.fixture(scope="module")
def page(two_hosts, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("page") / "both.html"
    result = scaling_in_process("report", *two_hosts, "--html", path)
    assert result.returncode == 0, result.output
    assert result.stdout.splitlines()[-1] == f"Report: {path}"
    return path


class Rows(HTMLParser):
    """The rows of the page's ``table.CLASS``: each a list of its cells' texts, with the row's
    class first."""

    def __init__(self, name: str):
        super().__init__()
        self.name, self.inside, self.rows = name, False, []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self.inside = attrs.get("class") == self.name
        elif self.inside and tag == "tr":
            self.rows.append([attrs.get("class") or ""])
        elif self.inside and tag in ("td", "th"):
            self.rows[-1].append("")

    def handle_data(self, data):
        if self.inside and self.rows and len(self.rows[-1]) > 1:
            self.rows[-1][-1] += data

    def handle_endtag(self, tag):
        if tag == "table":
            self.inside = False


def rows_of(page: str, name: str) -> list:
    parser = Rows(name)
    parser.feed(page)
    return [[row[0], *(" ".join(cell.split()) for cell in row[1:])] for row in parser.rows]


def test_each_run_is_labelled_by_its_name_hosts_and_date(page, two_hosts):
    text = page.read_text()
    assert rows_of(text, "runs")[1:] == [
        ["", "monday", "node-a", "2024-03-04", str(two_hosts[0]), "2"],
        ["", "tuesday", "node-b", "2024-03-05", str(two_hosts[1]), "2"]]
    header = rows_of(text, "side-by-side")[0]
    assert header[1:] == ["field", "monday (node-a, 2024-03-04)", "tuesday (node-b, 2024-03-05)",
                          "differs"]


def test_the_machines_are_side_by_side_with_the_differences_marked(page):
    text = page.read_text()
    lines = {row[1]: row for row in rows_of(text, "side-by-side")[1:]}
    assert lines["hosts"] == ["differs", "hosts", "node-a", "node-b", "differs"]
    assert lines["fingerprint: collective_env.NCCL_ALGO"] == \
        ["differs", "fingerprint: collective_env.NCCL_ALGO", "-", "Ring", "differs"]
    assert lines["torch"] == ["", "torch", "2.14.1", "2.14.1", ""]
    assert lines["fingerprint: kernel"][0] == "" and lines["fingerprint: cpu.model"][0] == ""
    assert "fingerprint: host" not in lines
    assert "The runs differ in: hosts, fingerprint: collective_env.NCCL_ALGO (marked below)." \
        in text


def test_the_same_curve_of_two_runs_stays_two_curves_with_their_own_baselines(page):
    grids = grids_of(page.read_text())
    assert grids["resnet50-224-gpu", f"monday: {CURVE}"][(32, 2)] == ("ok", "180.0 (1.80x, 90%)")
    assert grids["resnet50-224-gpu", f"tuesday: {CURVE}"][(32, 2)] == ("ok", "150.0 (1.50x, 75%)")
    assert page.read_text().count("<svg") == 1


def test_the_figure_draws_one_curve_per_run():
    from matplotlib.container import ErrorbarContainer

    from scaling.report.figures import scaling_figure
    from scaling.report.tables import with_scaling

    rows = [{**row, "run": run} for run, fast in (("monday", 180.0), ("tuesday", 150.0))
            for row in with_scaling([recorded_cell(1, 100.0), recorded_cell(2, fast)])]
    throughput, speedup, _ = scaling_figure(rows, "resnet50", by_run=True).axes
    curves = [c for c in throughput.containers if isinstance(c, ErrorbarContainer)]
    assert [curve.get_label() for curve in curves] == [f"monday: {CURVE}, batch 32",
                                                       f"tuesday: {CURVE}, batch 32"]
    assert [curve.lines[0].get_ydata().tolist() for curve in curves] == \
        [[100.0, 180.0], [100.0, 150.0]]
    assert curves[0].lines[0].get_linestyle() != curves[1].lines[0].get_linestyle()


def test_the_terminal_report_names_each_run_and_what_differs(two_hosts):
    result = scaling_in_process("report", *two_hosts)
    assert result.returncode == 0, result.output
    assert "monday (node-a, 2024-03-04)" in result.stdout
    assert "tuesday (node-b, 2024-03-05)" in result.stdout
    assert "180.0 (1.80x, 90%)" in result.stdout and "150.0 (1.50x, 75%)" in result.stdout
    assert result.stdout.splitlines()[-2:] == [
        "The runs differ in: hosts (node-a / node-b); fingerprint: collective_env.NCCL_ALGO "
        "(- / Ring)",
        "Report: add --html FILE for one page with every run's curves"]
    assert not any((folder / "results.csv").exists() for folder in two_hosts)


def test_one_folder_writes_its_page_where_html_says(two_hosts, tmp_path):
    # A copy: a one-folder report writes results.csv into its folder, which the shared
    # folders must not gain (test_the_terminal_report_names_each_run_and_what_differs).
    monday = shutil.copytree(two_hosts[0], tmp_path / "monday")
    path = tmp_path / "monday.html"
    result = scaling_in_process("report", monday, "--html", path)
    assert result.returncode == 0, result.output
    assert result.stdout.splitlines()[-1] == f"Report: {path}"
    assert grids_of(path.read_text())["resnet50-224-gpu", CURVE][(32, 2)] == \
        ("ok", "180.0 (1.80x, 90%)")


@browser
def test_browser_shows_both_runs_and_their_differences(page, tmp_path):
    result = headless(page.as_uri(), "--dump-dom", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    assert console_messages(result.stderr) == []
    grids = grids_of(result.stdout)
    assert {curve for _, curve in grids} == {f"monday: {CURVE}", f"tuesday: {CURVE}"}
    differing = [row[1] for row in rows_of(result.stdout, "side-by-side") if row[0] == "differs"]
    assert differing == ["hosts", "fingerprint: collective_env.NCCL_ALGO"]


def test_export_to_parquet_holds_every_record_of_both_runs(two_hosts, tmp_path):
    import pandas as pd

    target = tmp_path / "all.parquet"
    result = scaling_in_process("export", *two_hosts, "--to", target)
    assert result.returncode == 0, result.output
    assert f"wrote 5 records of 2 runs to {target}" in result.stdout
    table = pd.read_parquet(target)
    for folder in two_hosts:
        mine = table[table["run"] == folder.name]
        assert sorted(mine["cell"]) == sorted(r["cell"] for r in read_records(folder))
        assert set(mine["run_dir"]) == {str(folder.resolve())}
    tuesday = table[table["run"] == "tuesday"]
    assert sorted(tuesday["images_per_sec"].dropna()) == [100.0, 150.0]
    assert tuesday[tuesday["purpose"] == "matmul"]["seconds"].tolist() == [0.01]
    assert json.loads(table["versions"].iloc[0]) == {"torch": "2.14.1"}
    integers = pd.read_parquet(target, dtype_backend="numpy_nullable")["total_devices"]
    assert integers.dtype == "Int64" and integers.tolist()[:2] == [1, 2]


def test_export_to_duckdb_answers_sql(two_hosts, tmp_path):
    import duckdb

    target = tmp_path / "all.duckdb"
    for _ in range(2):  # the second export replaces the table
        assert scaling_in_process("export", *two_hosts, "--to", target).returncode == 0
    with duckdb.connect(str(target)) as connection:
        found = connection.sql("SELECT run, max(images_per_sec), count(*) FROM records "
                               "GROUP BY run ORDER BY run").fetchall()
    assert found == [("monday", 180.0, 2), ("tuesday", 150.0, 3)]


def relabelled(out_dir: Path, copy: Path, host: str) -> Path:
    """A copy of the run ``out_dir`` whose records and fingerprints name ``host`` instead: the
    same measurements, labelled as another host's."""
    shutil.copytree(out_dir, copy)
    renamed = {}
    for path in sorted((copy / FINGERPRINTS_DIR).glob("*.json")):
        fingerprint = json.loads(path.read_text())
        path.unlink()
        renamed[path.stem] = store(copy, {**fingerprint, "host": host})
    records = [{**record, "host": host, "hosts": [host] * len(record["hosts"]),
                "fingerprint": [renamed[name] for name in record["fingerprint"]]}
               for record in read_records(copy)]
    (copy / "results.jsonl").unlink()
    return write_records(copy, records)


@pytest.mark.slow
def test_two_recorded_runs_from_different_hosts(tmp_path):
    out = tmp_path / "here"
    scaling_cli_ok("sweep", write_sweep(tmp_path / "sweep.yaml", devices=[1, 2]), "--out", out)
    there = relabelled(out, tmp_path / "there", "node-b")
    page = tmp_path / "both.html"
    scaling_cli_ok("report", out, there, "--html", page)
    text = page.read_text()
    [record, *_] = read_records(out)
    curve = f"torch {record['versions']['torch']} / torchrun"
    grids = grids_of(text)
    for run in ("here", "there"):
        assert grids["cifar10-16-cpu", f"{run}: {curve}"][(4, 2)][0] == "ok"
    lines = {row[1]: row for row in rows_of(text, "side-by-side")[1:]}
    assert lines["hosts"] == ["differs", "hosts", record["host"], "node-b", "differs"]
    assert lines["CPU"] == ["", "CPU", record["cpu_model"], record["cpu_model"], ""]
    assert re.search(r"here \([^,]+, \d{4}-\d\d-\d\d\)", text)
