"""Errors that the command line reports as one line, without a traceback, and the exit status
each one gives.

Exit status: 0 done; 1 a cell failed or ``compare`` found a regression; 2 bad input
(:class:`ScalingError`); 3 the environment or infrastructure failed
(:class:`InfrastructureError`).
"""

from __future__ import annotations

from typing import Iterable

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INFRASTRUCTURE = 3


class ScalingError(Exception):
    """Bad input: an option, a file or a value that cannot be run as given."""

    exit_code = EXIT_BAD_INPUT


class InfrastructureError(ScalingError):
    """The environment or infrastructure failed: Slurm unreachable or refusing, no free port,
    a missing framework environment. Input that is fine may succeed when it is retried."""

    exit_code = EXIT_INFRASTRUCTURE


def exit_status(statuses: Iterable[str]) -> int:
    """The exit status of cells that ended with ``statuses``: 3 when an environment was missing
    (``env_error``), 1 when another cell was not ``ok``, 0 when all were."""
    ends = set(statuses)
    if "env_error" in ends:
        return EXIT_INFRASTRUCTURE
    return EXIT_FAILED if ends - {"ok"} else EXIT_OK


def positive_int(name: str, value) -> int:
    """``value`` when it is a positive integer (not a bool); a one-line error otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ScalingError(f"{name} must be a positive integer, got {value!r}")
    return value
