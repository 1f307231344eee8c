"""The communication knob of the JAX launchers, ``all_reduce_combine_mb``: XLA's all-reduce
combining threshold, and what the compiled step shows of it.

On GPU it is ``--xla_gpu_all_reduce_combine_threshold_bytes`` in ``XLA_FLAGS``, which XLA reads
when its backend starts; the worker adds it to the flags the process was given (the harness
gives workers only the ``XLA_FLAGS`` captured with the cell, so a launcher cannot add it). XLA's
CPU backend has no such threshold (jaxlib 0.10.2 has only the ``xla_gpu_`` flag), so a CPU cell
with the option ends ``error`` with that reason.
"""

from __future__ import annotations

import os
import re
from typing import Optional

OPTION = "all_reduce_combine_mb"
FLAG = "--xla_gpu_all_reduce_combine_threshold_bytes"
ALL_REDUCE = re.compile(r"\ball-reduce(?:-start)?\(")
"""An all-reduce instruction of HLO text (``all-reduce-start`` where XLA made it async)."""


def apply(cell: dict) -> None:
    """Put the cell's combining threshold into ``XLA_FLAGS``, before XLA starts; refuse it on
    CPU."""
    if OPTION not in cell["options"]:
        return
    if cell["device_type"] == "cpu":
        raise RuntimeError(
            f"{OPTION} does not run on CPU: XLA's CPU backend has no all-reduce combining "
            f"threshold (this jaxlib has only {FLAG[2:]}); run it on GPU or without it")
    threshold = int(cell["options"][OPTION] * 2**20)
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {FLAG}={threshold}".strip()


def threshold_mb() -> Optional[float]:
    """The combining threshold in the ``XLA_FLAGS`` of this process (the last one given wins,
    as in XLA's parser), in MiB; None where it gives none."""
    values = re.findall(rf"{FLAG}=(\d+)", os.environ.get("XLA_FLAGS", ""))
    return int(values[-1]) / 2**20 if values else None


def in_effect(compiled_text: str) -> dict:
    """The threshold XLA was started with, and the all-reduce instructions of the compiled
    step's optimized HLO, which the combiner merges (fewer, larger ones under a larger
    threshold)."""
    return {OPTION: threshold_mb(), "all_reduce_ops": len(ALL_REDUCE.findall(compiled_text))}
