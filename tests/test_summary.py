"""The answer first: the lines that end a sweep's or a report's output and open its HTML page,
checked on recorded runs."""

from __future__ import annotations

from conftest import recorded_cell, scaling_in_process, write_records


def recorded_run():
    """Two curves measured against their single cells: resnet50 loses a quarter of linear at
    two devices, most of it beyond its allreduce; cifar10 a tenth."""
    records = []
    for workload, two in (("resnet50", 150.0), ("cifar10", 180.0)):
        records += [recorded_cell(1, 100.0, workload=workload, launcher="single"),
                    recorded_cell(1, 95.0, workload=workload),
                    {**recorded_cell(2, two, workload=workload), "allreduce_time_s": 0.05}]
    return records


def test_a_report_ends_with_the_efficiency_range_the_largest_loss_and_the_marks(tmp_path):
    # resnet50 at 2 devices: a step of 64 / 150 = 0.427 s against the single cell's compute of
    # 32 / 100 = 0.32 s, the launcher's own 0.017 s (5% slower than single at one device) and
    # half the 0.05 s allreduce exposed (the middle of the overlap band): 0.065 s is left, 15%.
    result = scaling_in_process("report", write_records(tmp_path, recorded_run()), "--html")
    assert result.returncode == 0, result.output
    # The efficiency line is longer than the terminal's 120 columns: its worst point goes on a
    # line of its own.
    assert result.stdout.splitlines()[-5:] == [
        "At 2 devices: efficiency from 90% (cifar10, torch 2.14.1 / torchrun, batch 32)",
        "  down to 75% (resnet50, torch 2.14.1 / torchrun, batch 32).",
        "Largest loss at 2 devices: the rest, 15% of the step (resnet50, torch 2.14.1 / "
        "torchrun, batch 32).",
        "Nothing is marked noisy, drifted, suspect or a straggler.",
        f"Report: {tmp_path / 'report.html'}"]
    page = (tmp_path / "report.html").read_text()
    assert page.index('<ul class="summary"') < page.index("<table")
    assert "Largest loss at 2 devices: the rest" in page


def test_marked_points_are_counted_and_no_html_says_how_to_get_it(tmp_path):
    records = recorded_run()
    records[2].update(noisy=True, noise="other processes used 0.8 cores")
    result = scaling_in_process("report", write_records(tmp_path, records))
    assert result.returncode == 0, result.output
    assert result.stdout.splitlines()[-2:] == [
        "Marked: 1 noisy (the reasons are under the tables).",
        "Report: add --html for report.html"]
