"""The Horovod knobs in effect in a worker, for its rank report's ``communication_in_effect``.

Horovod 0.28 has no getter for its tensor-fusion threshold or cycle time: ``hvd.init`` reads
``HOROVOD_FUSION_THRESHOLD`` (bytes, ``strtol``; 128 MiB without it) and ``HOROVOD_CYCLE_TIME``
(ms, ``strtof``; 1 ms without it, 0 with ``HOROVOD_ENABLE_XLA_OPS``) from the process's
environment (``horovod/common/operations.cc``). So :func:`horovod_settings` takes that
environment just before ``hvd.init`` and :func:`horovod_in_effect` parses it as Horovod does;
under ``HOROVOD_AUTOTUNE`` they are where the autotuner starts. The compression is read off the
framework's optimizer, tape or trainer. Standard library only.
"""

from __future__ import annotations

import os
import re
from typing import Dict, Optional

DEFAULT_FUSION_BYTES = 128 * 2**20
DEFAULT_CYCLE_MS = 1.0
NAMES = ("HOROVOD_FUSION_THRESHOLD", "HOROVOD_CYCLE_TIME", "HOROVOD_ENABLE_XLA_OPS",
         "HOROVOD_AUTOTUNE")


def horovod_settings(environ=os.environ) -> Dict[str, str]:
    """The variables of ``environ`` that set Horovod's fusion threshold and cycle time: call it
    just before ``hvd.init``, which reads them."""
    return {name: environ[name] for name in NAMES if name in environ}


def init_horovod(hvd, options: Dict):
    """``hvd.init()`` for a cell with ``options``; returns the compression class its
    ``compression`` option names and the settings ``hvd.init`` read (:func:`horovod_settings`)."""
    compression = getattr(hvd.Compression, options.get("compression", "none"))
    settings = horovod_settings()
    hvd.init()
    return compression, settings


def _leading(text: str, pattern: str) -> float:
    """The number at the start of ``text`` (after blanks), 0 where there is none, as C's
    ``strtol``/``strtof`` read it."""
    found = re.match(r"\s*" + pattern, text)
    return float(found.group(0)) if found else 0.0


def _on(value: Optional[str]) -> bool:
    """Horovod's ``SetBoolFromEnv``: a value that starts with a nonzero integer."""
    return bool(value) and _leading(value, r"[+-]?\d+") > 0


def horovod_in_effect(settings: Dict[str, str], compression) -> Dict:
    """``fusion_threshold_mb`` and ``cycle_time_ms`` as ``hvd.init`` set them from
    ``settings``, and the name of the ``compression`` class (None where there is none)."""
    fusion = settings.get("HOROVOD_FUSION_THRESHOLD")
    cycle = settings.get("HOROVOD_CYCLE_TIME")
    fusion_bytes = DEFAULT_FUSION_BYTES if fusion is None else _leading(fusion, r"[+-]?\d+")
    if cycle is not None:
        cycle_ms = _leading(cycle, r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
    else:
        cycle_ms = 0.0 if _on(settings.get("HOROVOD_ENABLE_XLA_OPS")) else DEFAULT_CYCLE_MS
    return {"fusion_threshold_mb": fusion_bytes / 2**20, "cycle_time_ms": cycle_ms,
            "compression": None if compression is None else _class_name(compression)}


def _class_name(compression) -> str:
    """``hvd.Compression.fp16`` is a class (``FP16Compressor``); an instance names its class."""
    return (compression if isinstance(compression, type) else type(compression)).__name__
