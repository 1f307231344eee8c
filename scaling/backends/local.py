"""``--backend local``: cells run on this machine, one after another."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Dict, List, Optional

from scaling.backends.base import Backend, register_backend
from scaling.cell import Cell
from scaling.maxbatch.table import print_max_batches
from scaling.report.terminal import console, progress
from scaling.data import check_data_dir
from scaling.errors import ScalingError
from scaling.execute import preflight as check
from scaling.execute.ceiling import describe_ceiling, ensure_cells_ceilings
from scaling.execute.monitor import WatchSettings
from scaling.execute.run import first_launches, run_and_record
from scaling.execute.runner import pending_cells, run_cells
from scaling.execute.trees import SharedTrees
from scaling.launchers import get_launcher
from scaling.maxbatch.search import find_max_batches
from scaling.maxbatch.sweep import search_max_batches
from scaling.placement import local_placement
from scaling.sweep import expand, interpreters
from scaling.workers.common import node_name

SCHEDULER = "use --backend slurm"


@register_backend
class Local(Backend):
    name = "local"
    help = "local: run here, one cell after another"

    def check_data(self, data: str) -> None:
        check_data_dir(data)

    def placement(self, cell, node_rank=0, rendezvous=None, hosts=None):
        """Every rank here; a cell over several nodes only as this node's part of it, the same
        command run on each node with its ``node_rank`` and one rendezvous."""
        return local_placement(get_launcher(cell.launcher).ranks_per_node(cell), cell.nodes,
                               node_rank, rendezvous, hosts)

    def run(self, cell, out_dir, pythons, watch, placement, wait) -> Optional[Dict]:
        measure_ceilings(out_dir, [cell], pythons)
        [record] = run_cells([cell], out_dir, pythons, placement=placement, watch=watch)
        return record

    def run_trial(self, cell, out_dir) -> Optional[Dict]:
        """Under the tune's own progress bar."""
        return run_and_record(cell, out_dir, watch=WatchSettings())

    def sweep(self, spec, out_dir, watch, wait):
        max_batches = None
        if spec.needs_max_batch():
            max_batches, found = search_max_batches(spec, out_dir, console)
            print_max_batches(found, out_dir)
        cells = expand(spec, max_batches)
        several = sorted({cell.nodes for cell in cells if cell.nodes > 1})
        if several:
            raise ScalingError(f"cells on {', '.join(map(str, several))} nodes need a "
                               f"scheduler: {SCHEDULER} (or scaling run --nodes on each node)")
        todo = pending_cells(cells, out_dir)
        console.print(f"{spec.name}: {len(cells)} cells, {len(cells) - len(todo)} already "
                      f"recorded, output in {out_dir}")
        measure_ceilings(out_dir, todo, interpreters(spec))
        with SharedTrees(out_dir) as trees:
            if spec.share_processes:
                trees.plan(first_launches(todo, interpreters(spec)))
            run_cells(todo, out_dir, interpreters(spec), watch=watch, run=functools.partial(
                run_and_record, trees=trees if spec.share_processes else None))
        return cells, True

    def run_on(self, cell, out_dir, node) -> Optional[Dict]:
        """Here, where this machine is that node."""
        here = node_name()
        if node != here:
            raise ScalingError(f"the point ran on {node}, and this machine is {here}: measure "
                               "it again there, or with --backend slurm")
        return run_and_record(cell, out_dir, watch=WatchSettings())

    def search_here(self, what: str) -> None:
        """A search runs here."""

    def maxbatch(self, search, fields, out_dir, wait) -> Optional[List[str]]:
        results = find_max_batches(**search)
        print_max_batches(results, out_dir)
        return [result.status for result in results]

    def preflight(self, spec, out_dir, nodes, nodelist, wait) -> Optional[Dict]:
        """This node alone."""
        if (nodes or 1) > 1 or nodelist:
            raise ScalingError(f"several nodes need a scheduler: {SCHEDULER}, or check this "
                               "node alone without --nodes and --nodelist")
        reference = check.read_baseline(spec["baseline"]) if spec["baseline"] else None
        node = check.measure_node(out_dir, spec["device_type"], spec["devices"],
                                  spec["threads"], spec["repeats"],
                                  say=lambda what: console.print(f"preflight: {what}"))
        verdict = check.judge([node], spec["threshold"], reference, spec["baseline"])
        check.write_preflight(verdict, Path(out_dir) / check.PREFLIGHT_FILE)
        return verdict


def measure_ceilings(out_dir, cells: List[Cell], pythons: Dict[str, str]) -> None:
    """The CPU matmul ceilings that ``cells`` divide by, measured on this machine before they
    run where the folder has none, each said on the console."""
    for entry in ensure_cells_ceilings(out_dir, cells, pythons):
        progress.print(describe_ceiling(entry))
