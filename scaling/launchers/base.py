"""Launchers by name. A launcher names the frameworks it starts and turns a cell and its
placement into the argv and environment of this node's processes.

Adding a launcher is one module with a :func:`register_launcher` class, imported by the package
(``scaling.launchers``), or from outside it before the cell is made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from scaling.errors import ScalingError
from scaling import PROJECT_ROOT
from scaling.frameworks import get_framework
from scaling.registry import Registry


@dataclass(frozen=True)
class Number:
    """An option that takes a number from ``low`` (``low`` itself only where ``zero_ok``), an
    integer where ``integer``; ``unit`` names what it counts, for the help and the errors.
    ``tune``: the values ``scaling tune`` tries besides the option's default (none given)."""

    low: float = 0
    zero_ok: bool = False
    integer: bool = False
    unit: str = ""
    tune: Tuple[float, ...] = ()

    @property
    def __name__(self) -> str:
        kind = "integer" if self.integer else "number"
        bound = f">= {self.low:g}" if self.zero_ok else f"> {self.low:g}"
        return f"{kind} {bound}{f' ({self.unit})' if self.unit else ''}"

    def accepts(self, value) -> bool:
        kinds = (int,) if self.integer else (int, float)
        return (not isinstance(value, bool) and isinstance(value, kinds)
                and (value >= self.low if self.zero_ok else value > self.low))


class Launcher:
    """A way to start a cell's ranks. Subclasses set the class attributes and ``command``."""

    name: str
    frameworks: Tuple[str, ...]
    """The frameworks whose workers this launcher can start."""
    options: Dict[str, object] = {}
    """Options of this launcher, on top of the framework's: a type, a tuple of values or a
    :class:`Number`."""
    multi_node: bool = False
    """Whether ranks can span nodes."""
    max_devices: Optional[int] = None
    """The most devices per node it drives, where it has a limit."""
    gpu_only: Dict[str, Optional[Tuple]] = {}
    """Options, or some of their values, that exist on GPUs only (NCCL): option -> those
    values, or None for every value. The workers refuse them on CPU with the reason;
    ``scaling tune`` leaves them out of its CPU search."""
    data_parallel: str
    """The data-parallel mechanism its workers build, recorded in the cell
    (:attr:`scaling.cell.Cell.data_parallel`); workers never look at the launcher's name."""
    venvs: Dict[str, str] = {}
    """Frameworks whose workers run under another of the project's virtualenvs when this
    launcher starts them: framework -> virtualenv, relative to the project root."""
    build_hint: Optional[str] = None
    """The command that builds those virtualenvs."""
    packages: Tuple[str, ...] = ()
    """Distributions of its own whose versions ``scaling devices`` shows."""
    bucket_bytes: Optional[int] = None
    """The size up to which the mechanism packs gradients into one allreduce (DDP's buckets,
    Horovod's fusion buffer), at its default; None where it sends each tensor on its own."""
    def gradient_bucket_bytes(self) -> Optional[int]:
        """:attr:`bucket_bytes`, or where the environment overrides it, the override."""
        return self.bucket_bytes

    def option_env(self, options: Dict) -> Dict[str, str]:
        """Environment variables that a cell's ``options`` set for its processes: they join
        the cell's ``collective_env`` over the values the user exported, so that the option
        wins and the record says which value ran."""
        return {}

    def starts(self, framework: str) -> bool:
        """Whether this launcher starts ``framework``'s workers."""
        return framework in self.frameworks

    def command(self, cell, placement, cell_dir: str, python: str) -> List[str]:
        """The argv that starts this node's processes of ``cell``."""
        raise NotImplementedError

    def missing(self, framework: str, python: str) -> Optional[str]:
        """Why ``python`` cannot run this launcher's workers of ``framework``, or None."""
        return None

    def ranks_per_node(self, cell) -> int:
        """Processes on each node that report results: one per device by default."""
        return cell.devices

    def processes(self, cell) -> int:
        """Processes that report results, over all nodes."""
        return self.ranks_per_node(cell) * cell.nodes

    def env(self, cell, placement) -> Dict[str, str]:
        """Environment variables added for this cell's processes."""
        return thread_env(cell.threads_per_device)


LAUNCHERS: Registry[Launcher] = Registry("launcher")


def register_launcher(cls):
    """Class decorator: register an instance of ``cls`` under ``cls.name``."""
    if not hasattr(cls, "data_parallel"):
        raise ValueError(f"launcher {cls.name!r} names no data_parallel mechanism")
    LAUNCHERS.register(cls.name, cls())
    return cls


get_launcher = LAUNCHERS.get


def launchers_of(framework: str) -> List[str]:
    return sorted(name for name, launcher in LAUNCHERS.items() if launcher.starts(framework))


def default_python(framework: str, launcher: str) -> str:
    """The interpreter that runs ``framework``'s workers under ``launcher`` unless configured
    otherwise: the framework's, or the launcher's own virtualenv for that framework."""
    venv = get_launcher(launcher).venvs.get(framework)
    if venv:
        return str(PROJECT_ROOT / venv / "bin" / "python")
    return get_framework(framework).default_python()


def worker_argv(python: str, cell, cell_dir: str) -> List[str]:
    """``python -m WORKER CELL_DIR``: one process of the cell's framework."""
    return [python, "-m", get_framework(cell.framework).worker, cell_dir]


def thread_env(threads: int) -> Dict[str, str]:
    """Thread budget of one process, for the math libraries that read it."""
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


class OneProcessPerNode(Launcher):
    """One process drives every device of its node, with all of their threads (a mirrored
    strategy, a JAX mesh)."""

    def command(self, cell, placement, cell_dir: str, python: str) -> List[str]:
        return worker_argv(python, cell, cell_dir)

    def ranks_per_node(self, cell) -> int:
        return 1

    def env(self, cell, placement) -> Dict[str, str]:
        return thread_env(cell.threads_per_device * cell.devices)


class SpawnedPerDevice(Launcher):
    """One process per CPU device, or one per node holding all of its GPUs, started by the
    harness's spawner (``scaling.workers.spawn``) with every rank's endpoint."""

    multi_node = True
    spawn_flags: Tuple[str, ...] = ()
    """The spawner's flags for this launcher's environment, before the ranks' endpoints."""

    def ranks_per_node(self, cell) -> int:
        return 1 if cell.device_type == "gpu" else cell.devices

    def command(self, cell, placement, cell_dir: str, python: str) -> List[str]:
        return [python, "-m", "scaling.workers.spawn", *self.spawn_flags,
                "--workers", ",".join(placement.rank_endpoints()),
                "--first-rank", str(placement.first_rank),
                "--processes", str(placement.ranks_per_host), "--",
                *worker_argv(python, cell, cell_dir)]


def valid_options(launcher: Launcher, framework: str) -> Dict[str, object]:
    """The options a cell of ``framework`` under ``launcher`` takes: the framework's and the
    launcher's own, each a type, a tuple of the valid values or a :class:`Number`."""
    return {**get_framework(framework).options, **launcher.options}


def check_options(launcher: Launcher, framework: str, options: Dict) -> None:
    valid = valid_options(launcher, framework)
    for key, value in options.items():
        if key not in valid:
            names = ", ".join(sorted(valid)) or "none"
            raise ScalingError(f"unknown option {key!r} for {framework} under {launcher.name}; "
                               f"valid options: {names}")
        allowed = valid[key]
        if isinstance(allowed, Number):
            if not allowed.accepts(value):
                name = allowed.__name__
                raise ScalingError(f"option {key} takes {'an' if name[0] in 'aeiou' else 'a'} "
                                   f"{name}; got {value!r}")
        elif isinstance(allowed, tuple):
            if not any(type(value) is type(choice) and value == choice for choice in allowed):
                raise ScalingError(f"option {key} takes one of "
                                   f"{', '.join(str(v).lower() for v in allowed)}; got {value!r}")
        elif not isinstance(value, allowed):
            raise ScalingError(f"option {key} takes a {allowed.__name__}, got {value!r}")
