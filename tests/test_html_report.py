"""``scaling report DIR --html``: one self-contained page with the published grids, marks and
figures, checked as HTML and in a real headless browser."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from conftest import read_records, recorded_cell, scaling_cli_ok, write_records, write_sweep
from pages import browser, console_messages, grids_of, headless
from scaling.schema import STATUSES


MIXED = [
    recorded_cell(1, 100.0), recorded_cell(2, 190.0), recorded_cell(4, 360.0),
    recorded_cell(1, 60.0, batch=64), recorded_cell(2, 114.0, batch=64),
    recorded_cell(4, 0, batch=64, status="oom"),
    recorded_cell(1, 80.0, framework="tensorflow", launcher="tf-mirrored", version="2.16.2"),
    recorded_cell(2, 0, framework="tensorflow", launcher="tf-mirrored", version="2.16.2",
                  status="timeout"),
    recorded_cell(1, 0, batch=64, framework="tensorflow", launcher="tf-mirrored",
                  version="2.16.2", status="oom"),
    recorded_cell(2, 100.0, batch=64, framework="tensorflow", launcher="tf-mirrored",
                  version="2.16.2"),
    {**recorded_cell(1, 900.0, workload="alexnet"), "images_per_sec_ci95": [880.0, 920.0]},
    {**recorded_cell(4, 3000.0, workload="alexnet"), "images_per_sec_ci95": [2700.0, 3300.0],
     "telemetry": {"cpu_util_mean": 12.0, "rss_max_bytes_per_rank": [2**30, 3 * 2**29],
                   "gpu_util_mean": 93.0, "gpu_memory_max_bytes": 40 * 2**30,
                   "power_mean_w": 301.0, "energy_j": 1204.0},
     "step_breakdown": {"compute": 0.7, "communication": 0.2, "idle": 0.1}},
]
"""Recorded results mixing ok, OOM, a timeout, a missing baseline, two frameworks, and
intervals, one of them too wide."""

RESNET, ALEXNET = "resnet50-224-gpu", "alexnet-224-gpu"
TORCH, TENSORFLOW = "torch 2.14.1 / torchrun", "tensorflow 2.16.2 / tf-mirrored"


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory) -> Path:
    out = write_records(tmp_path_factory.mktemp("report") / "out", MIXED)
    scaling_cli_ok("report", out, "--html")
    return out


@pytest.fixture(scope="module")
def page(report_dir) -> str:
    return (report_dir / "report.html").read_text()


def test_grid_rows_are_batches_and_columns_are_device_counts(page):
    grids = grids_of(page)
    torch = grids[RESNET, TORCH]
    assert sorted(torch) == [(32, 1), (32, 2), (32, 4), (64, 1), (64, 2), (64, 4)]
    assert torch[(32, 2)] == ("ok", "190.0 (1.90x, 95%)")
    assert torch[(32, 4)] == ("ok", "360.0 (3.60x, 90%)")
    assert torch[(64, 2)] == ("ok", "114.0 (1.90x, 95%)")


def test_failures_are_marked_in_their_cells(page):
    grids = grids_of(page)
    assert grids[RESNET, TORCH][(64, 4)] == ("oom", "OOM")
    tensorflow = grids[RESNET, TENSORFLOW]
    assert tensorflow[(32, 2)] == ("timeout", "TIMEOUT")
    assert tensorflow[(64, 1)] == ("oom", "OOM")
    assert re.search(r'<td class="failed status-oom" data-status="oom" title="rank 0: CUDA out '
                     r'of memory">OOM</td>', page)


def test_a_cell_without_a_baseline_says_so_instead_of_a_speedup(page):
    assert grids_of(page)[RESNET, TENSORFLOW][(64, 2)] == \
        ("ok", "100.0 (no baseline)")


def test_cells_show_their_interval_and_suspect_cells_say_why(page):
    alexnet = grids_of(page)[ALEXNET, TORCH]
    assert alexnet[(32, 1)] == ("ok", "900.0 ± 20.0 (1.00x, 100%)")
    # Relative half widths 10% and 2.2% combine to 10.24%: 3.33x +- 0.34.
    assert alexnet[(32, 4)] == ("ok", "3,000.0 ± 300.0 ? (3.33x ± 0.34, 83%)")
    reason = "the 95% interval spans 20% of the figure"
    assert f'data-suspect="{reason}"' in page
    assert f"<b>?</b> alexnet at 224x224 on gpu, {TORCH}, batch 32, 4 devices: {reason}." in page


def test_telemetry_and_the_step_breakdown_have_their_table(page):
    details = page[page.index('<table class="details">'):]
    details = " ".join(re.sub(r"<[^>]+>", " ", details[:details.index("</table>")]).split())
    assert f"{TORCH} 32 4 0 12% 1.50 GiB 93% 40.00 GiB 301 W 1,204 J 70% 20% 10%" in details
    assert page.count('<table class="details">') == 1


def test_footnotes_explain_every_mark_on_the_page(page):
    for status in ("oom", "timeout"):
        assert f"<b>{status.upper()}</b>: {STATUSES[status]}." in html.unescape(page)
    assert "crashed" not in page.lower()


def test_figures_are_inline_svg_for_each_workload_and_across_workloads(page):
    assert page.count("<svg") == 4
    assert 'id="resnet50-224-gpu"' in page and 'id="alexnet-224-gpu"' in page
    assert 'id="across-workloads"' in page


def test_the_page_is_self_contained(page):
    assert "<script" not in page and "<link" not in page and "<img" not in page
    assert not re.search(r'(?:src|href)="(?:https?:)?//', page)
    assert "xlink:href=\"http" not in page


@pytest.mark.slow
def test_provenance_names_versions_sweep_file_and_command(tmp_path):
    sweep = write_sweep(tmp_path / "sweep.yaml", name="provenance-check")
    out = tmp_path / "out"
    scaling_cli_ok("sweep", sweep, "--out", out)
    scaling_cli_ok("report", out, "--html")
    page = (out / "report.html").read_text()
    [record] = read_records(out)
    provenance = page[page.index('id="provenance"'):]
    assert f'<th class="label">torch</th><td class="label">{record["versions"]["torch"]}' \
        in provenance
    assert record["host"] in provenance and record["cpu_model"] in provenance
    assert re.search(rf"\d{{4}}-\d\d-\d\dT[\d:]+Z scaling sweep {sweep} --out {out}", provenance)
    assert "name: provenance-check" in provenance
    curve = f"torch {record['versions']['torch']} / torchrun"
    assert grids_of(page)["cifar10-16-cpu", curve][(4, 1)][0] == "ok"


@browser
def test_browser_reports_console_errors_of_a_broken_page(tmp_path):
    broken = tmp_path / "broken.html"
    broken.write_text("<!DOCTYPE html><title>x</title><script>console.error('broken page')"
                      "</script>")
    result = headless(broken.as_uri(), "--dump-dom", tmp_path=tmp_path)
    assert any("broken page" in message for message in console_messages(result.stderr))


@browser
def test_browser_loads_the_page_without_console_errors(report_dir, tmp_path):
    result = headless((report_dir / "report.html").as_uri(), "--dump-dom", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    assert console_messages(result.stderr) == []
    grids = grids_of(result.stdout)
    assert grids[RESNET, TORCH][(64, 4)] == ("oom", "OOM")
    assert grids[RESNET, TENSORFLOW][(32, 2)] == ("timeout", "TIMEOUT")


@browser
def test_browser_screenshot_is_not_blank(report_dir, tmp_path):
    import matplotlib.image

    shot = tmp_path / "page.png"
    result = headless((report_dir / "report.html").as_uri(), f"--screenshot={shot}",
                      "--window-size=1400,2400", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    pixels = matplotlib.image.imread(shot)[..., :3]
    not_white = (pixels < 0.95).any(axis=-1).mean()
    assert 0.02 < not_white < 0.9
    assert len({tuple(colour) for colour in pixels.reshape(-1, 3)[::97].round(2)}) > 20


def test_cost_and_cpu_versus_gpu_sections_appear_with_their_data(tmp_path):
    import yaml

    matmul = [{"cell": f"m{n}{device}", "kind": "matmul", "purpose": "matmul",
               "framework": "torch", "device_type": device, "n": n, "status": "ok",
               "seconds": seconds} for n, device, seconds in
              [(10, "cpu", 1e-6), (10, "gpu", 2e-5), (1000, "cpu", 1e-2), (1000, "gpu", 1e-4)]]
    out = write_records(tmp_path / "out", [recorded_cell(1, 1000.0),
                                           {**recorded_cell(2, 1800.0), "images_per_joule": 2.5},
                                           *matmul])
    (out / "sweep.yaml").write_text(yaml.safe_dump({"prices": {"gpu": 2.0}}))
    scaling_cli_ok("report", out, "--html")
    page = (out / "report.html").read_text()
    costs = page[page.index('<table class="costs">'):]
    costs = " ".join(re.sub(r"<[^>]+>", " ", costs[:costs.index("</table>")]).split())
    assert "2 gpu 1,800.0 4.00 0.617 556 s 1.00x 1.00x 2.50" in costs
    section = page[page.index('id="cpu-vs-gpu"'):]
    assert section.count("<svg") == 2
    assert "torch: the GPU is faster from n = 1000 on" in section


def test_the_model_table_sets_each_point_beside_its_prediction(tmp_path):
    # single at 40 images/sec (0.2 s for a batch of 8), torchrun at one device 38 (the
    # launcher's own 10.5 ms), a 0.1 s allreduce hidden up to two thirds of 0.2105 s or not at
    # all: a step of 0.2105 to 0.3105 s, 16 images / 0.2605 s = 61.4 predicted.
    records = [recorded_cell(1, 40.0, batch=8, launcher="single"),
               recorded_cell(1, 38.0, batch=8),
               {**recorded_cell(2, 60.0, batch=8), "allreduce_time_s": 0.1}]
    out = write_records(tmp_path / "out", records)
    scaling_cli_ok("report", out, "--html")
    page = (out / "report.html").read_text()
    model = page[page.index('<table class="model">'):]
    text = " ".join(re.sub(r"<[^>]+>", " ", model[:model.index("</table>")]).split())
    assert "torch 2.14.1 / torchrun, batch 8 2 60.0 61.4 (51.5-76.0) 0.98 +10.5" in text


def test_without_prices_or_matmul_those_sections_are_absent(page):
    assert '<table class="costs">' not in page and 'id="cpu-vs-gpu"' not in page
