"""``scaling tune``: the fastest configuration of a workload on N devices, within a budget."""

from __future__ import annotations

from typing import Dict, List, Optional

import click
from rich.progress import BarColumn, Progress, TextColumn

from scaling.backends import backend_option, open_backend
from scaling.cell import make_cell, resolve_device_type
from scaling.cli.options import ALLOW_OVERSUBSCRIBE, pop_scheduler_flags, scheduler_options
from scaling.cli.output import console, prepare_out_dir
from scaling.cli.sweep import write_figures
from scaling.errors import ScalingError, positive_int
from scaling.execute.runner import check_resumable
from scaling.execute.store import ResultStore
from scaling.frameworks import framework_names
from scaling.launchers import LAUNCHERS
from scaling.sweep import FrameworkSection, MaxBatchSection, SweepConfig, resolve_batch
from scaling.report.terminal import progress
from scaling.tune.result import best_sweep, summarize, write_results
from scaling.tune.search import Budget, Tuner
from scaling.tune.space import Config, Space, default_space, load_space
from scaling.units import parse_bytes, parse_duration
from workloads import get_workload

TRIAL_STEPS = 2
"""Timed steps of a trial at least; its window then runs on to the rung's length."""
TRIAL_WARMUP = 1


def _names(text: Optional[str], valid: List[str], what: str) -> Optional[List[str]]:
    if text is None:
        return None
    names = [name.strip() for name in text.split(",") if name.strip()]
    for name in names:
        if name not in valid:
            raise ScalingError(f"unknown {what} {name!r}; valid: {', '.join(valid)}")
    if not names:
        raise ScalingError(f"--{what} names none; valid: {', '.join(valid)}")
    return names


def max_batches(space: Space, settings: Dict, out_dir, backend) -> Dict:
    """The largest batch that fits for each framework and launcher, where the space names
    ``max`` batches (the search's trials are recorded in the folder, like the tune's)."""
    if not any(isinstance(batch, str) for batch in space.batch_sizes):
        return {}
    backend.search_here("tune")
    from scaling.maxbatch.sweep import search_max_batches

    spec = SweepConfig(
        frameworks={framework: FrameworkSection(launchers=space.launchers[framework])
                    for framework in space.frameworks},
        workloads=[settings["workload"]], batch_sizes=["max"],
        devices=[settings["devices"]], device_type=settings["device_type"],
        image_size=settings["image_size"], threads_per_device=settings["threads_per_device"],
        memory_limit=settings["memory_limit"], maxbatch=MaxBatchSection(),
        allow_oversubscribe=settings["allow_oversubscribe"])
    found, _ = search_max_batches(spec, out_dir, progress)
    return found


def trial_factory(settings: Dict, found: Dict, cores: Optional[int]):
    """(configuration, trial number, window, timeout) -> the trial's cell."""
    def trial_cell(config: Config, repeat: int, window_s: float, timeout_s: float):
        batch = resolve_batch(config.batch_size, found.get(
            (config.framework, config.launcher, settings["workload"], settings["devices"])), 1)
        if batch is None:
            raise ScalingError(f"no batch fits {config.framework}/{config.launcher}")
        return make_cell(
            framework=config.framework, launcher=config.launcher,
            workload=settings["workload"], devices=settings["devices"], batch_size=batch,
            image_size=settings["image_size"], steps=TRIAL_STEPS, warmup=TRIAL_WARMUP,
            device_type=settings["device_type"],
            threads_per_device=settings["threads_per_device"],
            memory_limit=parse_bytes(settings["memory_limit"])
            if settings["memory_limit"] else None,
            repeat=repeat, purpose="tune", options=dict(config.options), references=False,
            timeout_s=min(timeout_s, settings["timeout_s"]), min_time_s=window_s,
            allow_oversubscribe=settings["allow_oversubscribe"], cores=cores)
    return trial_cell


def tune_progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(),
                    TextColumn("{task.fields[leader]}"), TextColumn("{task.fields[left]}"),
                    console=progress)


@click.command()
@click.option("--workload", required=True, help="The workload to tune.")
@click.option("--devices", type=int, required=True, help="Devices per node to tune for.")
@click.option("--budget", "budget_text", required=True, metavar="DURATION",
              help="Wall-clock budget, such as 30m, 1h or 600 (seconds): every trial's process "
                   "start and any max-batch trials count; the tune ends within it.")
@click.option("--framework", "framework_text", metavar="NAMES",
              help=f"Frameworks to try, comma-separated [default: torch]; of: "
                   f"{', '.join(framework_names())}.")
@click.option("--launcher", "launcher_text", metavar="NAMES",
              help="Launchers to try, comma-separated [default: every launcher of each "
                   "framework that drives --devices devices].")
@click.option("--image-size", type=int, help="Square input side [default: the workload's].")
@click.option("--space", "space_file", type=click.Path(dir_okay=False),
              help="YAML that replaces the default lists of frameworks, launchers, "
                   "batch_sizes (max, max*F allowed) or any option's values (a list, with "
                   "'default' for unset, or {low: L, high: H}).")
@click.option("--device-type", type=click.Choice(["auto", "gpu", "cpu"]), default="auto",
              show_default=True)
@click.option("--threads-per-device", type=int,
              help="CPU threads per worker [default: the cores over --devices].")
@click.option("--memory-limit", help="Memory cap per CPU device, e.g. 3GiB.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Which candidates are drawn from the space (the same for the same seed).")
@click.option("--timeout", "timeout_s", type=float, default=600, show_default=True,
              help="Seconds before a trial's processes are killed (less when the budget "
                   "ends sooner).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Output folder [default: runs/tune-WORKLOAD].")
@click.option("--resume", is_flag=True,
              help="Go on with the tune in OUT: recorded trials are read back, not run again.")
@ALLOW_OVERSUBSCRIBE
@backend_option
@scheduler_options
@click.pass_context
def tune(ctx, workload, devices, budget_text, framework_text, launcher_text, image_size,
         space_file, device_type, threads_per_device, memory_limit, seed, timeout_s, out_dir,
         resume, allow_oversubscribe, backend, wait, **slurm_flags):
    """Find the fastest configuration (images/sec) of WORKLOAD on --devices devices within
    --budget: framework x launcher x per-device batch x options (precision, layout, XLA) x the
    launchers' communication knobs.

    Successive halving: short timed windows for many candidates first, then windows twice as
    long for those still in the race. A candidate leaves it only when its interval (from two
    figures or more) lies below the leader's, or when a trial fails. Then the leader, the
    default and the runner-up run again, with the ablation: the leader with each of its knobs
    back at its default. Every trial is a cell record in OUT (purpose tune); a failed one never stops the
    search.

    Writes OUT/tune.json, OUT/best.yaml (a sweep file: scaling sweep OUT/best.yaml) and
    OUT/report.html with its "Tuning" section. Exits 0 with a best configuration, 1 when no
    trial ended ok. With --backend slurm each trial is a Slurm job, waited for (as with --wait);
    max batches need --backend local.
    """
    budget = Budget(parse_duration(budget_text))
    positive_int("--devices", devices)
    get_workload(workload)
    frameworks = _names(framework_text, framework_names(), "framework") or ["torch"]
    launchers = _names(launcher_text, LAUNCHERS.names(), "launcher")
    resolved = resolve_device_type(device_type)
    def space_of(names: Optional[List[str]]) -> Space:
        return default_space(names or frameworks, launchers, devices, resolved)

    space = load_space(space_file, space_of, framework_text is not None,
                       launcher_text is not None) if space_file else space_of(None)
    out_dir = out_dir or f"runs/tune-{workload}"
    prepare_out_dir(out_dir)
    check_resumable(out_dir, resume)
    runner = open_backend(backend, pop_scheduler_flags(slurm_flags))
    settings = {"workload": workload, "devices": devices, "device_counts": [devices],
                "image_size": image_size, "device_type": resolved,
                "threads_per_device": threads_per_device, "memory_limit": memory_limit,
                "budget_s": budget.seconds, "seed": seed, "timeout_s": timeout_s,
                "steps": TRIAL_STEPS, "warmup": TRIAL_WARMUP,
                "allow_oversubscribe": allow_oversubscribe, "space": space.describe()}
    trial_cell = trial_factory(settings, max_batches(space, settings, out_dir, runner),
                               runner.cores())
    trial_cell(space.default(), 0, 1.0, timeout_s)
    for pair, why in space.left_out.items():
        progress.print(f"{pair} left out: {why}")
    progress.print(f"tuning {workload} on {devices} {resolved} device(s): {space.size()} "
                   f"configurations, budget {budget.seconds:.0f} s, output in {out_dir}")
    with tune_progress() as bar:
        task = bar.add_task("trials", total=budget.seconds, leader="", left="")

        def said(tuner: Tuner, record: Dict) -> None:
            trial = tuner.trials[-1]
            outcome = f"{record['images_per_sec']:.1f} img/s" if record["status"] == "ok" \
                else f"{record['status']}: {record.get('error') or ''}"
            bar.console.print(f"trial {len(tuner.trials)} ({trial['stage']} {trial['rung']}): "
                              f"{trial['config'].label()}: {outcome}")
            leader = tuner.leader()
            bar.update(task, completed=min(tuner.budget.elapsed(), budget.seconds),
                       description=f"{len(tuner.trials)} trials, {len(tuner.alive())} in the "
                                   "race",
                       leader=f"leader {leader.median():.1f} img/s" if leader else "",
                       left=f"{max(tuner.budget.left(), 0):.0f} s left")

        tuner = Tuner(space, trial_cell, lambda cell: runner.run_trial(cell, out_dir),
                      ResultStore(out_dir).done(), budget, seed, on_trial=said)
        tuner.tune()
    summary = summarize(tuner, settings)
    best = tuner.best
    sweep = best_sweep(summary, best, tuner.window_s) if best else None
    for path in write_results(out_dir, summary, sweep):
        console.print(f"wrote {path}")
    write_figures(out_dir, [], False, "")
    print_tune(summary)
    ctx.exit(0 if best is not None else 1)


def _figure_text(found: Optional[Dict]) -> str:
    if not found:
        return "-"
    low, high = found["ci95"] or (None, None)
    interval = f" [{low:.1f}, {high:.1f}]" if low is not None else ""
    return f"{found['images_per_sec']:.1f} img/s{interval}, {found['figures']} figure(s)"


def print_tune(summary: Dict) -> None:
    """The answer: best, runner-up and default with their intervals, the ablation, the
    verdict."""
    for name in ("best", "runner_up", "default"):
        found = summary[name]
        console.print(f"{name.replace('_', '-')}: {found['config'] if found else '-'}: "
                      f"{_figure_text(found)}")
    tied = summary["tied_with_best"]
    if tied:
        more = f"; and {len(tied) - 3} more (tune.json)" if len(tied) > 3 else ""
        console.print(f"not separated from the best: {'; '.join(tied[:3])}{more}")
    if summary["ablation"]:
        console.print(f"ablation of {summary['ablation_of']['config']}:")
    for row in summary["ablation"]:
        if row["contribution"] is None:
            console.print(f"  {row['knob']}={row['best']} (default {row['default']}): not "
                          "measured within the budget")
            continue
        low, high = row["contribution_ci95"] or (row["contribution"], row["contribution"])
        console.print(f"  {row['knob']}={row['best']} (default {row['default']}): "
                      f"{row['contribution']:+.1%} [{low:+.1%}, {high:+.1%}]"
                      f", {row['effect']}")
    console.print(summary["verdict"])
