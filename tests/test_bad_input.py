"""Bad input gets one line that says what is wrong and what is valid, exit status 2, and no
traceback. These run the command line in this process (click's CliRunner): no worker starts
before the input is refused."""

from __future__ import annotations

import sys

import conftest
import pytest
from conftest import scaling_in_process, write_sweep



def assert_one_line_error(result, *fragments, code=2):
    assert result.returncode == code, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        result.exception
    assert "Traceback" not in result.stderr
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(error_lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in error_lines[0]


RUN = ("run", "--device-type", "cpu", "--steps", 1, "--warmup", 0)


def test_unknown_workload_names_the_valid_ones():
    result = scaling_in_process(*RUN, "--workload", "vgg16", "--batch-size", 2)
    assert_one_line_error(result, "unknown workload 'vgg16'",
                          "alexnet, cifar10, googlenet, inception_v3, mnist_mlp, resnet50")


@pytest.mark.parametrize("batch", [0, -4])
def test_non_positive_batch_is_refused(batch):
    result = scaling_in_process(*RUN, "--workload", "cifar10", "--batch-size", batch)
    assert_one_line_error(result, f"batch size must be a positive integer, got {batch}")


def test_more_gpus_than_exist_is_refused():
    from scaling.hardware import gpu_count

    wanted = gpu_count() + 1
    result = scaling_in_process("run", "--device-type", "gpu", "--devices", wanted,
                                "--workload", "cifar10", "--batch-size", 2)
    assert_one_line_error(result, f"{wanted} GPUs requested but this machine has {gpu_count()}")


def test_image_below_the_workload_minimum_is_refused():
    result = scaling_in_process(*RUN, "--workload", "inception_v3", "--batch-size", 2,
                                "--image-size", 32)
    assert_one_line_error(result, "below inception_v3's smallest input, 75")


def test_bad_memory_limit_is_refused():
    result = scaling_in_process(*RUN, "--workload", "cifar10", "--batch-size", 2,
                                "--memory-limit", "lots")
    assert_one_line_error(result, "bad memory size 'lots'")


@pytest.mark.parametrize("framework, launcher, option, message", [
    ("tensorflow", "tf-mirrored", "cross_device_ops=ring", "option cross_device_ops takes one "
     "of auto, reduce_to_one, hierarchical_copy, nccl; got 'ring'"),
    ("tensorflow", "tf-multiworker", "implementation=gloo",
     "option implementation takes one of auto, ring, nccl; got 'gloo'"),
    ("tensorflow", "tf-multiworker", "pack_mb=0", "option pack_mb takes a number > 0 (MiB); got 0"),
    ("mxnet", "mxnet-kvstore", "bigarray_bound=1.5",
     "option bigarray_bound takes an integer > 0 (elements); got 1.5"),
    ("jax", "jax", "all_reduce_combine_mb=-1",
     "option all_reduce_combine_mb takes a number >= 0 (MiB); got -1"),
])
def test_a_bad_communication_knob_names_its_valid_values(framework, launcher, option, message):
    result = scaling_in_process(*RUN, "--framework", framework, "--launcher", launcher,
                                "--workload", "cifar10", "--batch-size", 2, "--option", option)
    assert_one_line_error(result, message)


def test_unknown_yaml_key_names_the_file_and_the_valid_keys(tmp_path):
    config = write_sweep(tmp_path / "typo.yaml", batch_size=[4])
    result = scaling_in_process("sweep", config)
    assert_one_line_error(result, str(config), "unknown key 'batch_size'", "batch_sizes")


def test_unknown_framework_and_launcher_are_refused(tmp_path):
    config = write_sweep(tmp_path / "fw.yaml", frameworks={"caffe": {"launchers": ["x"]}})
    assert_one_line_error(scaling_in_process("sweep", config), "unknown framework 'caffe'",
                          "torch")
    config = write_sweep(tmp_path / "ln.yaml", frameworks={"torch": {"launchers": ["mpirun"]}})
    assert_one_line_error(scaling_in_process("sweep", config), "'mpirun' is not a torch launcher",
                          "torchrun")


def test_invalid_yaml_is_refused(tmp_path):
    config = tmp_path / "broken.yaml"
    config.write_text("workloads: [cifar10\n")
    assert_one_line_error(scaling_in_process("sweep", config), "not valid YAML")


def test_missing_sweep_file_is_refused(tmp_path):
    assert_one_line_error(scaling_in_process("sweep", tmp_path / "none.yaml"),
                          "cannot read sweep file")


def test_several_nodes_need_a_rendezvous_and_a_multi_node_launcher():
    result = scaling_in_process(*RUN, "--workload", "cifar10", "--batch-size", 2, "--nodes", 2)
    assert_one_line_error(result, "needs a rendezvous endpoint")
    result = scaling_in_process(*RUN, "--framework", "tensorflow", "--launcher", "tf-mirrored",
                                "--workload", "cifar10", "--batch-size", 2, "--nodes", 2,
                                "--rendezvous", "node0:29500")
    assert_one_line_error(result, "tf-mirrored runs on one node")


def test_an_output_folder_that_cannot_be_made_is_refused(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = scaling_in_process(*RUN, "--workload", "cifar10", "--batch-size", 2,
                                "--out", blocker / "sub")
    assert_one_line_error(result, f"cannot create output folder {blocker / 'sub'}")
    config = write_sweep(tmp_path / "sweep.yaml")
    result = scaling_in_process("sweep", config, "--out", blocker / "sub")
    assert_one_line_error(result, "cannot create output folder")


@pytest.mark.parametrize("endpoint", ["node0", "node0:", ":29500", "node0:99999", "a b:1"])
def test_a_rendezvous_that_is_not_host_port_is_refused(endpoint):
    result = scaling_in_process(*RUN, "--workload", "cifar10", "--batch-size", 2, "--nodes", 2,
                                "--rendezvous", endpoint)
    assert_one_line_error(result, "--rendezvous takes host:port", repr(endpoint))


@pytest.mark.parametrize("framework, smallest", [("torch", "1.00 GiB"), ("mxnet", "512.00 MiB")])
def test_a_memory_limit_too_small_to_start_a_worker_names_the_smallest(framework, smallest):
    result = scaling_in_process(*RUN, "--framework", framework, "--workload", "cifar10",
                                "--batch-size", 2, "--memory-limit", "100MiB")
    assert_one_line_error(result, f"too small to start a {framework} worker",
                          f"smallest that works is {smallest}")


@pytest.mark.slow
def test_more_cpu_threads_than_cores_is_refused_unless_allowed(tmp_path):
    from scaling.hardware import cpu_cores

    args = (*RUN, "--workload", "cifar10", "--batch-size", 2, "--image-size", 16,
            "--devices", 2, "--threads-per-device", cpu_cores(), "--out", tmp_path)
    assert_one_line_error(scaling_in_process(*args), "measure contention, not scaling",
                          "--allow-oversubscribe")
    allowed = conftest.scaling_cli(*args, "--allow-oversubscribe")
    assert allowed.returncode == 0, allowed.stderr


def test_devices_names_what_is_not_built_yet_and_the_command_that_builds_it(monkeypatch):
    from scaling import PROJECT_ROOT
    from scaling.launchers import get_launcher

    monkeypatch.setattr(get_launcher("horovod"), "venvs", {"tensorflow": ".venv-never-built"})
    result = scaling_in_process("devices")
    assert result.returncode == 0, result.output
    absent = PROJECT_ROOT / ".venv-never-built" / "bin" / "python"
    assert f"not built yet: {absent}; build it with: make horovod-env" in result.stdout


def test_devices_names_a_framework_its_interpreter_lacks_and_the_command_that_installs_it(
        monkeypatch):
    import dataclasses

    from scaling.frameworks import FRAMEWORKS

    jax = FRAMEWORKS.get("jax")
    monkeypatch.setitem(FRAMEWORKS._items, "jax",
                        dataclasses.replace(jax, packages=("jax-never-installed",)))
    result = scaling_in_process("devices")
    assert result.returncode == 0, result.output
    assert (f"not installed for {jax.default_python()}: jax; install it with: "
            "pip install -e '.[jax]'") in result.stdout


def test_a_report_of_several_folders_refuses_one_without_results(tmp_path):
    ran = conftest.write_records(tmp_path / "ran", [conftest.recorded_cell(1, 100.0)])
    (tmp_path / "empty").mkdir()
    result = scaling_in_process("report", ran, tmp_path / "empty", "--html", tmp_path / "a.html")
    assert_one_line_error(result, f"no results in {tmp_path / 'empty'}")


def test_a_report_of_several_folders_needs_the_pages_path_and_no_plot(tmp_path):
    runs = [conftest.write_records(tmp_path / name, [conftest.recorded_cell(1, 100.0)])
            for name in ("a", "b")]
    assert_one_line_error(scaling_in_process("report", *runs, "--html"),
                          "--html needs the page's path: --html FILE")
    assert_one_line_error(scaling_in_process("report", *runs, "--plot"),
                          "--plot and --price take one run folder")
    assert_one_line_error(scaling_in_process("report", runs[0], runs[0]),
                          f"{runs[0]} is given twice")
    assert_one_line_error(scaling_in_process("report", *runs, "--html", tmp_path / "no" / "p.html"),
                          f"folder {tmp_path / 'no'} does not exist")
    assert_one_line_error(scaling_in_process("report", "--html", *runs),
                          f"--html {runs[0]} is a folder; give the page's file name")


def test_export_to_an_unknown_format_names_the_valid_ones(tmp_path):
    ran = conftest.write_records(tmp_path / "ran", [conftest.recorded_cell(1, 100.0)])
    result = scaling_in_process("export", ran, "--to", tmp_path / "all.csv")
    assert_one_line_error(result, "unknown format .csv; valid: .parquet, .duckdb")


def test_export_without_its_library_names_the_extra(tmp_path, monkeypatch):
    # None in sys.modules is how Python marks a module that cannot be imported.
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    ran = conftest.write_records(tmp_path / "ran", [conftest.recorded_cell(1, 100.0)])
    result = scaling_in_process("export", ran, "--to", tmp_path / "all.parquet")
    assert_one_line_error(result, "writing .parquet needs pyarrow: pip install 'scaling[export]'")


@pytest.mark.parametrize("launcher, option, message", [
    ("torchrun", "bucket_cap_mb=0", "option bucket_cap_mb takes a number > 0 (MiB); got 0"),
    ("torchrun", "comm_hook=int8", "option comm_hook takes one of none, fp16, bf16; got 'int8'"),
    ("torchrun", "static_graph=1", "option static_graph takes a bool, got 1"),
    ("horovod", "fusion_threshold_mb=-1",
     "option fusion_threshold_mb takes a number >= 0 (MiB, 0: no fusion); got -1"),
    ("horovod", "cycle_time_ms=0", "option cycle_time_ms takes a number > 0 (ms); got 0"),
    ("horovod", "compression=bf16", "option compression takes one of none, fp16; got 'bf16'"),
    ("torchrun", "compression=fp16", "unknown option 'compression' for torch under torchrun"),
])
def test_bad_communication_knobs_name_the_valid_values(launcher, option, message):
    result = scaling_in_process(*RUN, "--workload", "cifar10", "--batch-size", 2,
                                "--launcher", launcher, "--option", option)
    assert_one_line_error(result, message)


TUNE = ("tune", "--workload", "mnist_mlp", "--devices", 1, "--device-type", "cpu")


@pytest.mark.parametrize("budget, message", [
    ("0", "a duration must be positive, got '0'"),
    ("soon", "bad duration 'soon'; write it as 90s, 10m, 1h30m or seconds"),
])
def test_a_tune_budget_that_is_not_a_positive_duration_is_refused(tmp_path, budget, message):
    result = scaling_in_process(*TUNE, "--budget", budget, "--out", tmp_path / "tune")
    assert_one_line_error(result, message)


@pytest.mark.parametrize("space, message", [
    ("options: {bucket_size: [1, 2]}", "unknown knob 'bucket_size' for torch/"),
    ("options: {bucket_cap_mb: {low: 100, high: 5}}",
     "knob bucket_cap_mb: impossible range 100..5; need 0 < low <= high"),
    ("options: {bucket_cap_mb: [25, -1]}", "option bucket_cap_mb takes a number > 0 (MiB)"),
    ("options: {comm_hook: [fp8]}", "option comm_hook takes one of none, fp16, bf16; got 'fp8'"),
    ("batch_sizes: [0]", "batch size 0 is neither a positive integer nor max"),
    ("launchers: [tf-mirrored]", "launcher 'tf-mirrored' starts none of torch"),
    ("knobs: {}", "a space file maps some of frameworks, launchers, batch_sizes, options"),
])
def test_a_tune_space_file_with_an_unknown_knob_or_impossible_range_is_refused(
        tmp_path, space, message):
    path = tmp_path / "space.yaml"
    path.write_text(space + "\n")
    result = scaling_in_process(*TUNE, "--budget", "1m", "--space", path,
                                "--out", tmp_path / "tune")
    assert_one_line_error(result, message)


def test_tune_names_the_valid_frameworks(tmp_path):
    result = scaling_in_process(*TUNE, "--budget", "1m", "--framework", "torch,caffe",
                                "--out", tmp_path / "tune")
    assert_one_line_error(result, "unknown framework 'caffe'; valid: ")
