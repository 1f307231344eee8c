"""The max-batch search behind a sweep's symbolic batch sizes (``batch_sizes: [max]``)."""

from __future__ import annotations

import itertools
from typing import Dict, List, Optional, Tuple

from rich.console import Console

from scaling.cell import describe
from scaling.errors import ScalingError
from scaling.maxbatch.search import (MaxBatchResult, TrialRunner, check_search_bounds,
                                     find_max_batches, run_kind, trial_factory)
from scaling.sweep import SweepConfig, device_counts, interpreters
from scaling.units import parse_bytes


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
            f"  max-batch {run_kind(r)}: {describe(r)}: {r['status']}"))
        for launcher, workload in itertools.product(fw_section.launchers, spec.workloads):
            make_trial = trial_factory(
                framework=fw_section.framework or framework,
                variant=fw_section.variant(framework), launcher=launcher, workload=workload,
                image_size=spec.image_size, steps=section.steps, warmup=section.warmup,
                device_type=device_type, threads_per_device=spec.thread_counts()[0],
                nodes=1, memory_limit=memory_limit, options=fw_section.options,
                timeout_s=spec.timeout_s, allow_oversubscribe=spec.allow_oversubscribe,
                plain={"steps": spec.steps, "warmup": spec.warmup, "timeout_s": spec.timeout_s,
                       "min_time_s": spec.min_time_s, "profile": spec.profile})
            for result in find_max_batches(
                    make_trial, device_counts(spec.devices, device_type), section.multiple_of,
                    start, section.max, runner, section.strategy, section.headroom):
                found[(framework, launcher, workload, result.devices)] = result.max_batch
                results.append(result)
    return found, results



