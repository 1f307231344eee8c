"""Validate every CUDA path on real GPUs, through the real command line, in one command.

    PYTHONPATH=. python3 bench/gpu_validation.py --output bench/results/gpu-validation.json
    PYTHONPATH=. python3 bench/gpu_validation.py --budget-s 540 --output "$OUT/gpu.json"
    PYTHONPATH=. python3 bench/gpu_validation.py --steps throughput,reference --output FILE
    PYTHONPATH=. python3 bench/gpu_validation.py --dry-run --gpus 8

The steps (``bench/gpu_steps.py``) go in the order of ``STEPS``, what matters most first.
``--budget-s`` plans those whose estimates (one H100) fit, in that order; a step this machine
cannot run (no GPU, a framework that does not import with CUDA, one GPU for the allreduce) or
whose inputs are not planned is left out, and the plan says why. Each step adds its commands'
exit statuses and seconds, and its figures, to ``--output`` as it ends, so a run stopped part-way
keeps what it measured; run again with the same ``--out``, its sweeps resume.

A machine without a package registry installs from wheels carried to it: ``--wheels DIR``
installs every ``DIR/*.whl`` in the ``install`` step, which says how long that took.

``--dry-run`` prints the plan with its estimates for ``--gpus`` GPUs, every framework taken to
import, and parses every command it would run through the harness's own command line (and each
sweep file through its loader): it runs on CPU, so the plan cannot rot while no GPU is lent.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import click

from gpu_steps import PROBES, STEPS, Context, Step, probe
from scaling.cli import cli
from scaling.hardware import gpu_count
from scaling.sweep import load_sweep

ROOT = Path(__file__).resolve().parents[1]
BUDGET_S = 2400.0
"""The default budget: 40 minutes of device time."""
COMMAND_TIMEOUT_S = 1200.0
INSTALL = "install"
"""The step that runs first, before the rest are planned on what it made importable."""


def plan(ctx: Context, chosen: List[str], budget_s: float, done: Dict,
         spent: float = 0.0) -> Tuple[List[Step], Dict[str, str]]:
    """The ``chosen`` steps to run, in ``STEPS`` order, after ``spent`` seconds of the budget,
    and each left-out step's reason."""
    planned: List[Step] = []
    left_out: Dict[str, str] = {}
    for step in STEPS:
        if step.name not in chosen:
            continue
        absent = [name for name in step.after
                  if name not in done and name not in {s.name for s in planned}]
        why = ("no GPU here" if ctx.gpus == 0 and step.name != INSTALL else None) \
            or step.needs(ctx) or (f"needs {', '.join(absent)}, not planned" if absent else None)
        if why is None and spent + step.estimate_s > budget_s:
            why = f"over the budget: {budget_s - spent:.0f} s left of {budget_s:.0f} s"
        if why:
            left_out[step.name] = why
        else:
            planned.append(step)
            spent += step.estimate_s
    return planned, left_out


def check_command(argv: List[str]) -> None:
    """Parse a ``scaling`` command as the harness's command line would, and load its sweep
    file; raise ``click.ClickException`` (or ``ScalingError``) where it does not parse."""
    if argv[0] != "scaling":
        return
    name, *rest = argv[1:]
    command = cli.commands.get(name)
    if command is None:
        raise click.UsageError(f"no command {name!r}")
    with command.make_context(name, list(rest)):
        pass
    if name == "sweep":
        load_sweep(rest[0])


def run_command(argv: List[str], log: Path) -> Dict:
    """One command, its output kept in ``log``; its exit status and seconds."""
    if argv[0] == "scaling":
        argv = [sys.executable, "-m", "scaling", *argv[1:]]
    elif argv[0] == "python":
        argv = [sys.executable, *argv[1:]]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    started = time.monotonic()
    print(f"$ {' '.join(argv)}", flush=True)
    with log.open("a") as output:
        try:
            code = subprocess.run(argv, stdout=output, stderr=subprocess.STDOUT, env=env,
                                  timeout=COMMAND_TIMEOUT_S).returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
    seconds = time.monotonic() - started
    print(f"  exit {code} after {seconds:.0f} s", flush=True)
    return {"argv": argv, "exit": code, "seconds": round(seconds, 1)}


def write(results: Dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False) as handle:
        json.dump(results, handle, indent=1, default=str)
    os.replace(handle.name, path)


def run_step(step: Step, ctx: Context) -> Dict:
    """The step's commands, one after another, then its figures."""
    folder = ctx.out / step.name
    folder.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    commands = [run_command(argv, folder / "log.txt") for argv in step.commands(ctx)]
    failed = [c for c in commands if c["exit"] != 0]
    return {"what": step.what, "estimate_s": step.estimate_s,
            "seconds": round(time.monotonic() - started, 1), "commands": commands,
            "status": "ok" if not failed else f"a command exited {failed[0]['exit']}",
            "figures": step.summary(ctx)}


def run_and_write(step: Step, ctx: Context, results: Dict, output: Path) -> None:
    """Run ``step`` and rewrite ``output`` with its results added."""
    print(f"== {step.name}: {step.what}", flush=True)
    results["steps"][step.name] = run_step(step, ctx)
    write(results, output)


def dry_run(ctx: Context, planned: List[Step], left_out: Dict[str, str],
            budget_s: float) -> None:
    total = sum(step.estimate_s for step in planned)
    print(f"The plan for {ctx.gpus} GPU(s), every framework taken to import, within "
          f"{budget_s:.0f} s:")
    for step in planned:
        print(f"  {step.name:<11} {step.estimate_s:>5.0f} s  {step.what}")
        for argv in step.commands(ctx):
            check_command(argv)
            print(f"                       $ {' '.join(argv)}")
    for name, why in left_out.items():
        print(f"  {name:<11} left out: {why}")
    print(f"{len(planned)} steps, {total:.0f} s ({total / 60:.1f} min) of {budget_s:.0f} s; "
          "every command parses.")


def parse_steps(text: Optional[str]) -> List[str]:
    """The steps ``--steps`` names (all by default); ValueError on an unknown one."""
    valid = [step.name for step in STEPS]
    names = valid if text is None else [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in valid]
    if unknown:
        raise ValueError(f"unknown step {unknown[0]!r}; the steps are {', '.join(valid)}")
    return names


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", help="comma-separated steps to run [default: all]")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S,
                        help="device seconds the plan fits in [default: %(default)g]")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the plan and check its commands; run nothing")
    parser.add_argument("--gpus", type=int, help="GPUs to plan for [default: nvidia-smi's]")
    parser.add_argument("--wheels", type=Path, help="a folder of wheels to install first")
    parser.add_argument("--out", type=Path, default=Path("runs/gpu-validation"))
    parser.add_argument("--output", type=Path, default=Path("runs/gpu-validation.json"),
                        help="the results JSON, rewritten as each step ends")
    args = parser.parse_args(argv)
    try:
        chosen = parse_steps(args.steps)
    except ValueError as error:
        print(f"Error: {error}", file=sys.stderr)
        return 2
    gpus = args.gpus if args.gpus is not None else gpu_count() or (1 if args.dry_run else 0)
    if args.dry_run:
        with tempfile.TemporaryDirectory() as scratch:
            ctx = Context(Path(scratch), gpus, dict.fromkeys(PROBES, True), args.wheels)
            dry_run(ctx, *plan(ctx, chosen, args.budget_s, {}), args.budget_s)
        return 0
    results = json.loads(args.output.read_text()) if args.output.exists() else {"steps": {}}
    ctx = Context(args.out.resolve(), gpus, {}, args.wheels)
    ran: List[Step] = []
    if INSTALL in chosen:
        ran, _ = plan(ctx, [INSTALL], args.budget_s, results["steps"])
        for step in ran:
            run_and_write(step, ctx, results, args.output)
    ctx.available = (results["steps"][INSTALL]["figures"]["frameworks"] if ran
                     else probe() if gpus else dict.fromkeys(PROBES, False))
    planned, left_out = plan(ctx, [name for name in chosen if name != INSTALL], args.budget_s,
                             results["steps"], sum(step.estimate_s for step in ran))
    results.update(gpus=gpus, budget_s=args.budget_s,
                   planned=[step.name for step in ran + planned], left_out=left_out)
    write(results, args.output)
    for step in planned:
        run_and_write(step, ctx, results, args.output)
    failed = [s.name for s in ran + planned if results["steps"][s.name]["status"] != "ok"]
    print(f"{len(ran + planned) - len(failed)} of {len(ran + planned)} steps ok"
          + (f"; not ok: {', '.join(failed)}" if failed else "") + f"; results in {args.output}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
