"""``scaling maxbatch``: the largest per-device batch that fits, at each device count."""

from __future__ import annotations

import click

from scaling.cell import resolve_device_type
from scaling.backends import backend_option, open_backend
from scaling.cli.options import (cell_options, parse_device_list, parse_options,
                                 pop_scheduler_flags, scheduler_options)
from scaling.cli.output import console, prepare_out_dir
from scaling.errors import exit_status
from scaling.maxbatch.bracket import STRATEGIES
from scaling.maxbatch.search import (PLAIN_CELL, TrialRunner, check_search_bounds, run_kind,
                                     trial_factory)
from scaling.units import parse_bytes


@click.command()
@cell_options(steps=3, warmup=1, out="runs/maxbatch", what="trial")
@click.option("--devices", "device_list", default="1", show_default=True,
              help="Device counts to search, e.g. 1,2,4,8.")
@click.option("--min", "minimum", type=int, help="Starting batch [default: --multiple-of].")
@click.option("--max", "maximum", type=int, help="Largest batch worth trying.")
@click.option("--multiple-of", type=int, default=1, show_default=True,
              help="Granularity: every batch tried is a multiple of it.")
@click.option("--headroom", type=float,
              help="Also report a safe batch: this fraction of the largest, e.g. 0.9.")
@click.option("--strategy", type=click.Choice(sorted(STRATEGIES)), default="model",
              show_default=True,
              help="model: predict the limit from measured memory; doubling: double, bisect.")
@click.option("--confirm-steps", type=int, default=PLAIN_CELL["steps"], show_default=True,
              help="Timed steps of each confirmation run: a plain `scaling run` cell's.")
@click.option("--confirm-warmup", type=int, default=PLAIN_CELL["warmup"], show_default=True,
              help="Untimed steps before a confirmation's.")
@backend_option
@scheduler_options
@click.pass_context
def maxbatch(ctx, device_list, minimum, maximum, multiple_of, headroom, strategy, confirm_steps,
             confirm_warmup, memory_limit, option_pairs, python, out_dir, backend, wait,
             **fields):
    """Find the largest per-device batch that fits at each device count.

    Each trial is a real cell under the real launcher (forward, backward and optimizer step).
    The search grows geometrically, then predicts the limit from the measured memory per sample
    and brackets it to the exact batch at the given granularity. The answer is then confirmed
    by at least two runs as a plain `scaling run` cell (its 20 steps after 5 of warm-up, or
    --confirm-steps after --confirm-warmup, with --timeout stretched to them), each in its own
    processes; a batch that fails one is not the
    answer, and the next one down is confirmed. Trials are recorded in OUT/results.jsonl, so
    an interrupted search resumes without repeating one. The table is also written to
    OUT/maxbatch.csv.

    Exits 0 when every search found its answer (a batch, or that none fits), 1 when one gave
    up on a trial that failed other than by running out of memory, twice.

    With --backend slurm, the whole search runs as one job on one node (its trials depend on
    each other); --wait blocks until it ends and prints the table, and exits 1 when the job
    wrote none.
    """
    backend = open_backend(backend, pop_scheduler_flags(fields))
    counts = parse_device_list(device_list)
    prepare_out_dir(out_dir)
    cap = parse_bytes(memory_limit) if memory_limit else None
    fields["device_type"] = resolve_device_type(fields["device_type"])
    start = check_search_bounds(multiple_of, minimum, maximum, headroom, fields["device_type"],
                                cap)
    make_trial = trial_factory(plain={"steps": confirm_steps, "warmup": confirm_warmup},
                               memory_limit=cap, options=parse_options(option_pairs), **fields)
    for count in counts:
        make_trial(count, start, 0)
        make_trial(count, start, 0, confirmation=True)
    runner = TrialRunner(out_dir, python, on_trial=lambda r: console.print(
        f"  {run_kind(r)}: {r['devices']} device(s), batch {r['batch_size']}: {r['status']}"))
    search = {"make_trial": make_trial, "device_counts": counts, "multiple_of": multiple_of,
              "minimum": start, "maximum": maximum, "run_trial": runner, "strategy": strategy,
              "headroom": headroom}
    statuses = backend.maxbatch(search, fields, out_dir, wait)
    if statuses is not None:
        ctx.exit(exit_status(statuses))
