"""Run a list of cells in order, with a progress bar, recording each one as it finishes."""

from __future__ import annotations

from typing import Dict, List, Optional

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                           TimeElapsedColumn)

from scaling.cell import Cell
from scaling.errors import ScalingError
from scaling.execute import run_and_record
from scaling.store import ResultStore


def pending_cells(cells: List[Cell], out_dir, resume: bool) -> List[Cell]:
    """The cells still to run. Without ``resume``, an output folder with results is an error."""
    done = ResultStore(out_dir).done()
    if done and not resume:
        raise ScalingError(
            f"{out_dir} already holds {len(done)} results; pass --resume to continue that sweep "
            "or choose another --out"
        )
    return [cell for cell in cells if cell.cell_id not in done]


def describe(cell: Cell) -> str:
    return (f"{cell.framework}/{cell.launcher} {cell.workload} x{cell.total_devices} "
            f"batch {cell.batch_size}")


def run_cells(cells: List[Cell], out_dir, pythons: Optional[Dict[str, str]] = None,
              console: Optional[Console] = None) -> List[Dict]:
    console = console or Console(stderr=True)
    pythons = pythons or {}
    records = []
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn()]
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("cells", total=len(cells))
        for cell in cells:
            progress.update(task, description=describe(cell))
            record = run_and_record(cell, out_dir, python=pythons.get(cell.framework))
            records.append(record)
            rate = (f"{record['images_per_sec']:.1f} img/s" if record["status"] == "ok"
                    else record["error"])
            progress.console.print(f"{describe(cell)}: {record['status']} {rate}")
            progress.advance(task)
    return records
