"""Run a list of cells in order, with a progress bar, recording each one as it finishes."""

from __future__ import annotations

import itertools
from typing import Dict, List, Optional, Tuple

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                           TimeElapsedColumn)

from scaling.cell import Cell
from scaling.errors import ScalingError
from scaling.execute import run_and_record
from scaling.maxbatch import (MaxBatchResult, TrialRunner, check_search_bounds,
                              find_max_batches, trial_factory)
from scaling.monitor import WatchSettings
from scaling.placement import Placement
from scaling.store import ResultStore
from scaling.sweep import SweepConfig, device_counts, interpreters
from scaling.units import parse_bytes


def check_resumable(out_dir, resume: bool) -> None:
    """Without ``resume``, an output folder that already holds results is an error."""
    done = ResultStore(out_dir).done()
    if done and not resume:
        raise ScalingError(
            f"{out_dir} already holds {len(done)} results; pass --resume to continue that sweep "
            "or choose another --out"
        )


def pending_cells(cells: List[Cell], out_dir) -> List[Cell]:
    done = ResultStore(out_dir).done()
    return [cell for cell in cells if cell.cell_id not in done]


def search_max_batches(spec: SweepConfig, out_dir, console: Console
                       ) -> Tuple[Dict[Tuple, Optional[int]], List[MaxBatchResult]]:
    """Run the max-batch search behind a sweep's symbolic batch sizes."""
    section = spec.maxbatch
    if len(spec.device_types()) > 1 or len(spec.thread_counts()) > 1:
        raise ScalingError("batch_sizes: max searches one device type and one "
                           "threads_per_device; give numeric batch sizes for those axes")
    device_type = spec.device_types()[0]
    memory_limit = parse_bytes(spec.memory_limit) if spec.memory_limit else None
    start = check_search_bounds(section.multiple_of, section.min, section.max, section.headroom,
                                device_type, memory_limit)
    pythons = interpreters(spec)
    found, results = {}, []
    for framework, fw_section in spec.frameworks.items():
        runner = TrialRunner(out_dir, pythons.get(framework), on_trial=lambda r: console.print(
            f"  max-batch trial: {describe(r)}: {r['status']}"))
        for launcher, workload in itertools.product(fw_section.launchers, spec.workloads):
            make_trial = trial_factory(
                framework=fw_section.framework or framework,
                variant=fw_section.variant(framework), launcher=launcher, workload=workload,
                image_size=spec.image_size, steps=section.steps, warmup=section.warmup,
                device_type=device_type, threads_per_device=spec.thread_counts()[0],
                nodes=1, memory_limit=memory_limit, options=fw_section.options,
                timeout_s=spec.timeout_s, allow_oversubscribe=spec.allow_oversubscribe)
            for result in find_max_batches(
                    make_trial, device_counts(spec.devices, device_type), section.multiple_of,
                    start, section.max, runner, section.strategy, section.headroom):
                found[(framework, launcher, workload, result.devices)] = result.max_batch
                results.append(result)
    return found, results


def describe(fields: Dict) -> str:
    """A cell or record in a few words: ``torch/torchrun cifar10 x2 batch 16``."""
    return (f"{fields['framework']}/{fields['launcher']} {fields['workload']} "
            f"x{fields['devices'] * fields['nodes']} batch {fields['batch_size']}")


def run_cells(cells: List[Cell], out_dir, pythons: Optional[Dict[str, str]] = None,
              console: Optional[Console] = None,
              placement: Optional[Placement] = None,
              watch: WatchSettings = WatchSettings()) -> List[Dict]:
    """Run and record each cell in turn; ``placement`` defaults to every rank on this machine,
    ``watch`` says how cells are watched."""
    console = console or Console(stderr=True)
    pythons = pythons or {}
    records = []
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn()]
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("cells", total=len(cells))
        for cell in cells:
            progress.update(task, description=describe(cell.to_dict()))
            record = run_and_record(cell, out_dir, python=pythons.get(cell.environment),
                                    placement=placement, watch=watch)
            records.append(record)
            rate = (f"{record['images_per_sec']:.1f} img/s" if record["status"] == "ok"
                    else record["error"])
            if record.get("noisy"):
                rate += f" (noisy: {record['noise']})"
            progress.console.print(f"{describe(cell.to_dict())}: {record['status']} {rate}")
            progress.advance(task)
    return records
