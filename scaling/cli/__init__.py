"""The ``scaling`` command line: one module per command group, gathered into one group here.

Exit status: 0 done; 1 a cell failed (``run``, ``sweep``, ``status --wait``: a cell is not ok;
``maxbatch``: a search gave up), ``compare`` found a regression or ``accept`` a confirmed fail;
2 bad input; 3 the environment or infrastructure failed (Slurm or a Ray head unreachable or
refusing, no free port, a missing framework environment).
"""

from __future__ import annotations

import logging
import sys

import click

from scaling import __version__
from scaling.backends import BACKENDS
from scaling.cli import (accept, allreduce, analysis, data, history, maxbatch, predict,
                         preflight, queue, run, runs, sweep, tune)
from scaling.errors import InfrastructureError, ScalingError


class ScalingGroup(click.Group):
    """Reports a :class:`ScalingError` as one line, ``Error: ...``, with no traceback: exit
    status 2 for bad input, 3 when the environment or infrastructure failed."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except InfrastructureError as error:
            click.echo(f"Error: {error}", err=True)
            ctx.exit(error.exit_code)
        except ScalingError as error:
            raise click.UsageError(str(error)) from None


@click.group(cls=ScalingGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="scaling")
def cli():
    """Measure how training throughput (images/sec) scales with the number of devices.

    A cell is one measurement: a framework and launcher, a workload, a device count and a
    per-device batch size. Cells run in fresh processes under a timeout, here or through Slurm
    (--backend slurm); each one ends with a status (ok, oom, timeout, crashed, error,
    env_error, ...) and is appended to OUT/results.jsonl.

    Exit status: 0 done (every cell is ok); 1 a cell ended otherwise (oom, crashed, timeout,
    ...; for `maxbatch`: a search gave up), `compare` found a regression, or `accept` a
    confirmed fail; 2 bad input; 3 the environment or infrastructure failed (Slurm or a Ray
    head unreachable or refusing, no free port, a missing framework environment).
    """


for command in (run.devices, run.run, sweep.sweep, sweep.report_command, maxbatch.maxbatch,
                queue.status, queue.cancel, analysis.matmul,
                analysis.compare_command, allreduce.allreduce, predict.predict,
                data.make_data_command, preflight.preflight, runs.export_command, tune.tune,
                history.history_group, accept.accept):
    cli.add_command(command)
for name in BACKENDS.names():
    for command in BACKENDS.get(name).commands:
        cli.add_command(command)


def main() -> None:
    logging.basicConfig(format="warning: %(message)s", level=logging.WARNING, stream=sys.stderr)
    cli(prog_name="scaling")
