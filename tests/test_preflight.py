"""``scaling preflight``: this node measured alone, its figures judged against the fleet's
median or a saved baseline, and the verdict in a table, preflight.json, the report's HTML and
the exit status."""

from __future__ import annotations

import json
import socket

import pytest
from conftest import scaling_cli, scaling_in_process

from scaling.execute.preflight import FIGURES, PREFLIGHT_FILE, judge

QUICK = ("preflight", "--device-type", "cpu", "--repeats", 2)


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """One preflight of this machine, saved as a baseline too."""
    folder = tmp_path_factory.mktemp("preflight")
    result = scaling_cli(*QUICK, "--out", folder / "out", "--save-baseline",
                         folder / "baseline.json")
    return folder, result


@pytest.mark.slow
def test_this_node_alone_passes_with_every_figure_in_a_table_a_file_and_the_report(checked):
    folder, result = checked
    assert result.returncode == 0, result.stderr
    verdict = json.loads((folder / "out" / PREFLIGHT_FILE).read_text())
    [node] = verdict["nodes"]
    assert node["host"] == socket.gethostname() and node["devices"] == 2
    assert set(node["figures"]) == set(FIGURES) - {"pair_busbw_GBps"} and not node["errors"]
    assert all(figure["value"] > 0 for figure in node["figures"].values())
    assert node["flags"] == {} and verdict["nodelist"] == node["host"]
    for name in node["figures"]:
        assert name in result.stdout
    assert f"good nodes: --nodelist {node['host']}" in result.stdout
    html = (folder / "out" / "report.html").read_text()
    assert '<section id="preflight">' in html and node["host"] in html
    assert json.loads((folder / "baseline.json").read_text()) == verdict


@pytest.mark.slow
def test_a_node_below_its_saved_baseline_is_flagged_and_exits_1(checked, tmp_path):
    folder, _ = checked
    baseline = json.loads((folder / "baseline.json").read_text())
    [node] = baseline["nodes"]
    # This host once had 100 times its bandwidth and a tenth of its other figures: far enough
    # that no load on this machine between the two checks moves either verdict.
    for name, figure in node["figures"].items():
        figure["value"] *= 100 if name == "triad_GBps" else 0.1
    (tmp_path / "faster.json").write_text(json.dumps(baseline))
    result = scaling_cli(*QUICK, "--baseline", tmp_path / "faster.json", "--threshold", 50,
                         "--out", tmp_path)
    assert result.returncode == 1, result.stderr
    [judged] = json.loads((tmp_path / PREFLIGHT_FILE).read_text())["nodes"]
    assert list(judged["flags"]) == ["triad_GBps"]
    assert "below the baseline" in judged["flags"]["triad_GBps"]
    assert f"--exclude {judged['host']}" in result.stdout


def test_the_node_behind_the_fleet_median_is_flagged_and_the_rest_make_the_nodelist():
    def node(host, tflops, gbps):
        return {"host": host, "figures": {"matmul_tflops": {"value": tflops},
                                          "triad_GBps": {"value": gbps}}}

    verdict = judge([node("n1", 1.0, 10.0), node("n2", 0.98, 10.2), node("n3", 0.7, 9.5)], 10)
    assert verdict["flagged"] == ["n3"] and verdict["nodelist"] == "n1,n2"
    assert verdict["nodes"][2]["flags"] == {
        "matmul_tflops": "0.7 is 29% below the fleet median (0.98)"}


@pytest.mark.parametrize("args, message", [
    (("--nodes", 0), "0 is not in the range x>=1"),
    (("--threshold", 0), "must be a percentage between 0 and 100, got 0"),
    (("--threshold", 150), "must be a percentage between 0 and 100, got 150"),
    (("--baseline", "/nonexistent/preflight.json"), "is not a readable preflight file"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path):
    result = scaling_in_process("preflight", *args, "--out", tmp_path)
    assert result.returncode == 2
    assert message in result.stderr
    assert not (tmp_path / PREFLIGHT_FILE).exists()
