"""Where the command line writes: the console, and the output folder it prepares."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console

from scaling.errors import ScalingError
from scaling.report.provenance import note_command

# Piped output (a log, a notebook cell) is not cut to 80 columns, so wide tables stay whole.
console = Console(width=None if sys.stdout.isatty() else 200)


def prepare_out_dir(out_dir: str) -> None:
    """Create the output folder, or say in one line why it cannot be; note the command in it."""
    path = Path(out_dir)
    if path.exists() and not path.is_dir():
        raise ScalingError(f"--out {out_dir} exists and is not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ScalingError(f"cannot create output folder {out_dir}: {error.strerror}") from None
    note_command(path, sys.argv[1:])
