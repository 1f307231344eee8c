"""The interface every backend implements, and the registry they join (one module per
backend beside this one)."""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from scaling.cell import Cell
from scaling.errors import ScalingError
from scaling.execute.monitor import WatchSettings
from scaling.placement import Placement
from scaling.registry import Registry
from scaling.sweep import SlurmSection, SweepConfig


class Backend:
    """How cells run: one, a sweep's, a max-batch search's trials and a tune's, and a node
    check. ``flags``: the command line's scheduler settings (the Slurm flags, named as the
    sweep's ``slurm:`` keys; ``allocation``, ``preflight_check`` and ``exclude`` beside them)."""

    name: str
    help: str
    commands: tuple = ()
    """Hidden commands of its own, which the cells it starts call."""
    one_allocation: bool = False
    """Whether it runs a whole sweep in one allocation (``--one-allocation``)."""

    def __init__(self, flags: Optional[Dict] = None):
        self.flags = {key: value for key, value in (flags or {}).items()
                      if value not in (None, ())}
        if self.flags.get("allocation") == "one" and not self.one_allocation:
            raise ScalingError("--one-allocation runs the sweep inside one Slurm job: add "
                               "--backend slurm")

    def cores(self, section: Optional[SlurmSection] = None) -> Optional[int]:
        """The cores of the machine that cells run on, which a CPU device's default threads
        divide; None for this machine's."""
        return None

    def check_data(self, data: str) -> None:
        """Check a cell's data folder before it is submitted, where the cells run here (on a
        cluster each node checks its own, before training)."""

    def placement(self, cell: Cell, node_rank: int = 0, rendezvous: Optional[str] = None,
                  hosts: Optional[List[str]] = None) -> Optional[Placement]:
        """Where ``cell``'s ranks go, from the command line; None where the backend places
        them itself."""
        return None

    def run(self, cell: Cell, out_dir, pythons: Dict[str, str], watch: WatchSettings,
            placement: Optional[Placement], wait: bool) -> Optional[Dict]:
        """The cell's record (this node's part over several nodes), or None when it was only
        submitted."""
        raise NotImplementedError

    def run_trial(self, cell: Cell, out_dir) -> Optional[Dict]:
        """A tune trial's record, waited for; None where it never ran."""
        raise NotImplementedError

    def sweep(self, spec: SweepConfig, out_dir, watch: WatchSettings,
              wait: bool) -> Tuple[List[Cell], bool]:
        """Run or submit the sweep's cells; they and whether they have all ended."""
        raise NotImplementedError

    def search_here(self, what: str) -> None:
        """Raise unless max-batch searches inside a ``what`` run on this machine."""
        raise ScalingError(f"batch_sizes: max searches on this machine: {what} with --backend "
                           "local, or give numeric batch sizes")

    def maxbatch(self, search: Dict, fields: Dict, out_dir, wait: bool) -> Optional[List[str]]:
        """``search``: the arguments of :func:`scaling.maxbatch.search.find_max_batches`;
        ``fields``: the command's cell fields. The status of each device count's search
        (``ok``, or that of the trial that stopped it), or None when it was only submitted."""
        raise ScalingError("a max-batch search runs its trials here or as one Slurm job: use "
                           "--backend local or --backend slurm")

    def preflight(self, check: Dict, out_dir, nodes: Optional[int], nodelist: Optional[str],
                  wait: bool) -> Optional[Dict]:
        """Check the nodes (``check``: devices, threads, repeats, threshold, baseline) and write
        the verdict to OUT/preflight.json: the verdict, ``{}`` when none came, or None when
        the check was only submitted."""
        raise ScalingError("preflight checks this node (--backend local) or a Slurm partition's "
                           "nodes (--backend slurm)")

    def preflight_sweep(self, spec: SweepConfig, out_dir, check: Dict) -> Optional[Dict]:
        """A sweep's ``--preflight``: the nodes it may use checked first and those flagged
        kept out of its cells (in these flags). The verdict (``{}`` when none came), or None
        where the check runs inside the sweep's own job instead."""
        raise ScalingError("--preflight compares the nodes of a cluster: add --backend slurm "
                           "(check this node alone with scaling preflight --baseline FILE)")

    def run_on(self, cell: Cell, out_dir, node: str) -> Optional[Dict]:
        """``cell`` measured again on ``node`` (``accept --confirm``), waited for: its record,
        or None where it never ran."""
        raise ScalingError("--confirm measures again here or through Slurm: use --backend "
                           "local or --backend slurm")

    def submitted(self, out_dir) -> bool:
        """Whether ``out_dir`` holds cells submitted through this backend."""
        return False

    def status(self, out_dir, wait: bool) -> Dict[str, Dict]:
        """The submitted cells' states by cell, waited for with ``wait``."""
        raise NotImplementedError

    def cancel(self, out_dir) -> Dict[str, Dict]:
        """Cancel the submitted cells that have not ended; their states by cell."""
        raise NotImplementedError


BACKENDS: Registry[type] = Registry("backend")


def register_backend(cls):
    BACKENDS.register(cls.name, cls)
    return cls
