"""``jax.profiler``'s trace, turned into the Chrome trace that ``breakdown`` reads.

The profiler writes a Perfetto trace (Chrome trace events) of its XSpace. On a CPU, every HLO
operation that a device ran is an event naming its ``hlo_op``; the compiled module's text gives
each operation's opcode, and the collectives among them (``all-reduce`` and its kin, whose
events include the wait for the other devices) are named ``collective:OP`` so that the
breakdown counts them as communication. On a GPU the kernels of the device planes are kept
(NCCL's kernels name themselves). Host events of the runtime and of Python are left out: they
are not operations.
"""

from __future__ import annotations

import glob
import gzip
import json
import re
from typing import Callable, Dict, List

COLLECTIVES = {"all-reduce", "all-reduce-start", "all-gather", "all-gather-start",
               "reduce-scatter", "collective-permute", "collective-permute-start", "all-to-all"}
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*.*?\s([a-z][a-z\-]*)\(", re.M)


def opcodes(hlo_text: str) -> Dict[str, str]:
    """Each instruction's opcode, by name, in the compiled module's text."""
    return {name: opcode for name, opcode in _INSTRUCTION.findall(hlo_text)}


def chrome_events(trace: Dict, ops: Dict[str, str]) -> List[Dict]:
    """The operation events of a Perfetto trace: HLO operations run by a CPU device, and the
    kernels of the GPU planes."""
    gpu_pids = {event["pid"] for event in trace["traceEvents"]
                if event.get("ph") == "M" and event.get("name") == "process_name"
                and event["args"]["name"].startswith("/device:GPU")}
    events = []
    for event in trace["traceEvents"]:
        if event.get("ph") != "X":
            continue
        if event.get("pid") in gpu_pids:
            events.append({**event, "cat": "kernel"})
            continue
        op = (event.get("args") or {}).get("hlo_op")
        if op is not None and event["name"] == op:
            name = f"collective:{op}" if ops.get(op) in COLLECTIVES else op
            events.append({**event, "name": name, "cat": "op"})
    return events


def profile(jax, run_steps: Callable[[], None], path: str, hlo_text: str) -> None:
    """Run ``run_steps`` under ``jax.profiler`` and write the Chrome trace of their operations
    to ``path`` (the profiler's own files go to a folder beside it)."""
    logdir = path[:-len(".json")] + "-jax"
    with jax.profiler.trace(logdir, create_perfetto_trace=True):
        run_steps()
    with gzip.open(sorted(glob.glob(f"{logdir}/**/perfetto_trace.json.gz", recursive=True))[-1]) as raw:
        trace = json.load(raw)
    with open(path, "w") as out:
        json.dump({"traceEvents": chrome_events(trace, opcodes(hlo_text))}, out)
