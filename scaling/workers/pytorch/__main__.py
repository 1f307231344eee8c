"""Run one PyTorch process of a cell: ``python -m scaling.workers.pytorch CELL_DIR``."""

import importlib

from scaling.workers.loop import run_worker
from scaling.workers.pytorch.collective import collective
from scaling.workers.pytorch.session import build


def preload() -> None:
    """torch, and its compiler, which the first optimizer step imports (about 2 s on a core)."""
    importlib.import_module("torch._dynamo")


if __name__ == "__main__":
    run_worker(build, collective=collective, preload=preload)
