"""Options that several commands share, and parsing their values into the harness's terms."""

from __future__ import annotations

from typing import Dict, List

import click
import yaml

from scaling.cell import DEVICE_TYPES, MODES
from scaling.errors import ScalingError, positive_int
from scaling.execute.monitor import NOISE_CORES, WatchSettings
from scaling.frameworks import FRAMEWORKS, framework_names
from scaling.launchers import LAUNCHERS
from workloads import WORKLOADS


def parse_options(pairs) -> dict:
    """``("xla=true", "mixed_precision=false")`` -> {"xla": True, "mixed_precision": False}."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ScalingError(f"--option takes KEY=VALUE, got {pair!r}")
        options[key] = yaml.safe_load(value)
    return options


def parse_prices(pairs) -> Dict[str, float]:
    """``("gpu=2.5", "cpu=0.05")`` -> {"gpu": 2.5, "cpu": 0.05}."""
    prices = {}
    for pair in pairs:
        key, sep, value = pair.rpartition("=")
        try:
            amount = float(value)
        except ValueError:
            amount = -1.0
        if not sep or not key or amount < 0:
            raise ScalingError(f"--price takes KEY=USD_PER_HOUR (KEY: cpu, gpu, a device name "
                               f"or instance), got {pair!r}")
        prices[key] = amount
    return prices


def parse_device_list(text: str) -> List[int]:
    """``"1,2,4"`` -> [1, 2, 4]; a one-line error for anything else."""
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ScalingError(f"--devices takes a comma-separated list such as 1,2,4,8, "
                           f"got {text!r}") from None
    if not counts:
        raise ScalingError(f"--devices must list positive counts, got {text!r}")
    for count in counts:
        positive_int("--devices counts", count)
    return counts


def _describe_option(allowed) -> str:
    return "|".join(str(v).lower() for v in allowed) if isinstance(allowed, tuple) \
        else allowed.__name__


def option_help() -> str:
    """``--option``'s help, from the options the frameworks and launchers register."""
    def listed(options) -> str:
        return ", ".join(f"{key}={_describe_option(allowed)}"
                         for key, allowed in sorted(options.items()))

    parts = [f"{name}: {listed(framework.options)}" for name, framework in FRAMEWORKS.items()]
    parts += [f"under {name}: {listed(launcher.options)}"
              for name, launcher in LAUNCHERS.items() if launcher.options]
    return "Framework option KEY=VALUE, repeatable (" + "; ".join(parts) + ")."


ALLOW_OVERSUBSCRIBE = click.option(
    "--allow-oversubscribe", is_flag=True,
    help="Run even when CPU devices x threads exceed the cores (such results measure "
         "contention, not scaling).")


def apply(options, command):
    """Decorate ``command`` with ``options``, the first one outermost."""
    for option in reversed(options):
        command = option(command)
    return command


def watch_options(command):
    """``--wait-for-quiet [SECONDS]`` and ``--no-telemetry``, as a ``watch`` argument."""
    return apply([
        click.option(
            "--wait-for-quiet", "wait_for_quiet_s", type=float, is_flag=False, flag_value=60.0,
            default=None, metavar="[SECONDS]",
            help="Before each cell, wait up to SECONDS (60 if not given) until other processes "
                 f"use at most {NOISE_CORES} cores; a cell that starts or runs in noise is "
                 "recorded noisy either way."),
        click.option(
            "--no-telemetry", is_flag=True,
            help="Do not sample the cell while it runs (CPU, memory and GPU use); its noise is "
                 "then judged from a look at the machine just before it starts."),
    ], command)


def watch_settings(wait_for_quiet_s, no_telemetry) -> WatchSettings:
    return WatchSettings(telemetry=not no_telemetry, wait_for_quiet_s=wait_for_quiet_s)


def scheduler_options(command):
    """``--wait``, the Slurm resources and the Ray cluster's address, as ``wait`` and flags
    that :func:`pop_scheduler_flags` takes out of the command's arguments."""
    return apply([
        click.option("--wait", is_flag=True,
                     help="With --backend slurm: block, with a progress bar, until every cell "
                          "has ended."),
        click.option("--partition"), click.option("--account"), click.option("--qos"),
        click.option("--time", "time_limit", help="Slurm time limit per cell, e.g. 0:30:00."),
        click.option("--gpus-per-node", type=int), click.option("--cpus-per-task", type=int),
        click.option("--constraint"),
        click.option("--sbatch-arg", "extra_args", multiple=True,
                     help="Passed to sbatch as it is; repeatable."),
        click.option("--parallel", type=int,
                     help="At most this many array tasks of a job at once (%N)."),
        click.option("--address",
                     help="With --backend ray: the cluster's head, HOST:PORT or "
                          "ray://HOST:10001 [default: RAY_ADDRESS, else the one Ray finds]."),
        click.option("--shared", is_flag=True,
                     help="Let other jobs share a cell's nodes (by default each cell asks for "
                          "whole nodes: sbatch --exclusive); its record says so."),
    ], command)


SCHEDULER_FLAGS = ("partition", "account", "qos", "time_limit", "gpus_per_node", "cpus_per_task",
               "constraint", "extra_args", "parallel", "shared", "address")


def pop_scheduler_flags(fields: dict) -> dict:
    """The scheduler flags out of a command's arguments, the Slurm ones named as the sweep's
    ``slurm:`` keys (each backend takes those it knows)."""
    flags = {name: fields.pop(name) for name in SCHEDULER_FLAGS}
    flags["time"] = flags.pop("time_limit")
    flags["shared"] = flags["shared"] or None  # absent: the sweep file's slurm: decides
    return flags


def cell_options(steps: int, warmup: int, out: str, what: str):
    """The options that ``run`` and ``maxbatch`` share: everything that defines a cell but its
    device count and batch size."""
    options = [
        click.option("--framework", type=click.Choice(framework_names()), default="torch",
                     show_default=True),
        click.option("--launcher", type=click.Choice(LAUNCHERS.names()),
                     help="How the ranks are started [default: the framework's: " + ", ".join(
                         f"{name} {fw.default_launcher}" for name, fw in FRAMEWORKS.items())
                     + "]."),
        click.option("--workload", required=True,
                     help=f"One of: {', '.join(WORKLOADS.names())}."),
        click.option("--image-size", type=int,
                     help="Square input side [default: the workload's]."),
        click.option("--steps", type=int, default=steps, show_default=True,
                     help=f"Timed steps per {what}."),
        click.option("--warmup", type=int, default=warmup, show_default=True,
                     help="Untimed steps first."),
        click.option("--mode", type=click.Choice(MODES), default="train", show_default=True,
                     help="train: forward, backward and optimizer step; forward: inference "
                          "only; forward_backward: no optimizer step."),
        click.option("--device-type", type=click.Choice(DEVICE_TYPES), default="auto",
                     show_default=True, help="auto: GPUs if there are any, else CPU workers."),
        click.option("--threads-per-device", type=int,
                     help="CPU threads per worker [default: cores // the largest device count "
                          "of the run or sweep, at least 1; a run into a folder whose cells "
                          "of the same curve or baseline have a default unit takes that one]."),
        click.option("--memory-limit", help="Memory cap per CPU device, e.g. 3GiB."),
        click.option("--data", type=click.Path(file_okay=False),
                     help="Train on the real JPEGs of this ImageFolder tree (DIR/train/<class>/"
                          "*.jpg, see make-data) through the framework's own input pipeline, "
                          "and say whether the input is the bound [default: one synthetic "
                          "batch on the device]."),
        click.option("--loader-workers", type=int, default=0, show_default=True,
                     help="Loader worker processes (tf.data threads) decoding and augmenting "
                          "real images; 0: the training process does it."),
        click.option("--timeout", "timeout_s", type=float, default=600, show_default=True,
                     help=f"Seconds before a {what}'s processes are killed."),
        click.option("--option", "option_pairs", multiple=True, metavar="KEY=VALUE",
                     help=option_help()),
        click.option("--python", help="Interpreter for the workers [default: the framework's]."),
        click.option("--out", "out_dir", default=out, show_default=True,
                     type=click.Path(file_okay=False)),
        ALLOW_OVERSUBSCRIBE,
    ]
    return lambda command: apply(options, command)


HISTORY = click.option(
    "--history", "history_path", type=click.Path(dir_okay=False),
    help="Also add the run's points to this history file (made if missing; see scaling "
         "history).")


def add_to_history(path, out_dir) -> None:
    from scaling.report.history import add_runs

    from scaling.cli.output import console

    console.print(f"added {add_runs(path, [out_dir])} points to the history {path}")


def history_later(path, out_dir) -> str:
    """What to do for --history when the command returns before its cells end."""
    return (f"--history: the cells have not ended yet; once they have (scaling status "
            f"{out_dir} --wait), add them with: scaling history add {path} {out_dir}")
