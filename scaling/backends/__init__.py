"""Where cells run: each backend a plug-in of one registry (``scaling.backends.base``), built
once per command with its settings (:func:`open_backend`). Every command that runs cells
(``run``, ``sweep``, ``maxbatch``, ``allreduce``, ``preflight``, ``tune``, ``status``,
``cancel``) goes through :class:`~scaling.backends.base.Backend`, and none decides by a
backend's name."""

from __future__ import annotations

from typing import Dict, Optional

import click

from scaling.backends import local, ray, slurm  # noqa: F401  (each registers itself)
from scaling.backends.base import BACKENDS, Backend
from scaling.errors import ScalingError


def open_backend(name: str, flags: Optional[Dict] = None) -> Backend:
    """The backend ``name`` with the command's scheduler ``flags``."""
    return BACKENDS.get(name)(flags)


def submitting_backend(out_dir) -> Backend:
    """The backend through which ``out_dir``'s cells were submitted, for ``status`` and
    ``cancel``."""
    for name in BACKENDS.names():
        backend = open_backend(name)
        if backend.submitted(out_dir):
            return backend
    raise ScalingError(f"{out_dir} holds no submitted cells: its cells ran where they were "
                       "asked, and its records say how they ended (scaling report)")


def backend_option(command):
    """``--backend NAME``, from the registry."""
    return click.option(
        "--backend", type=click.Choice(BACKENDS.names()), default="local", show_default=True,
        help="; ".join(BACKENDS.get(name).help for name in BACKENDS.names()) + ".")(command)
