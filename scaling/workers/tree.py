"""A rank of a shared process tree: several cells, one after another, in the processes that
one launch started (``scaling.execute.trees`` on the harness's side).

The launcher starts the workers with a *tree folder* in place of a cell folder (it holds
``tree.json``). Each rank reads the cell folders it is to run, one line each, from its own FIFO
in that folder (``rank{N}.fifo``), which the harness holds open; the end of the file (the
harness closed the tree, or died) ends the rank. Before each cell a rank notes the folder
(``rank{N}.cell``), so that a rank killed part way is reported in the cell it was running. The
first cell's process start counts as its own; a later cell starts when its line arrives. A tree
started ahead of its first cell (``"preload"`` in ``tree.json``) imports its framework, says
it is ready, and counts its first cell, too, from its line.

Between two cells a rank lets the last cell's objects go and starts its peak memory afresh.
Standard library only, as ``scaling.workers.loop`` that uses it.
"""

from __future__ import annotations

import gc
import json
import os
import time
from typing import Iterator, Optional, Tuple

from scaling.atomic import write_json_atomically
from scaling.workers import common

TREE_FILE = "tree.json"


def is_tree(folder: str) -> bool:
    """Whether ``folder`` is a shared tree's folder rather than one cell's."""
    return os.path.exists(os.path.join(folder, TREE_FILE))


def fifo_path(tree_dir: str, rank: int) -> str:
    return os.path.join(tree_dir, f"rank{rank}.fifo")


def current_path(tree_dir: str, rank: int) -> str:
    return os.path.join(tree_dir, f"rank{rank}.cell")


def idle_path(tree_dir: str, rank: int) -> str:
    return os.path.join(tree_dir, f"rank{rank}.idle")


def preloads(tree_dir: str) -> bool:
    """Whether the tree was started ahead of its first cell, its ranks to import first."""
    with open(os.path.join(tree_dir, TREE_FILE)) as spec:
        return bool(json.load(spec).get("preload"))


def cells(tree_dir: str, rank: int, entered: Optional[float]) -> Iterator[Tuple[str, float]]:
    """The cell folders this rank runs, in order, each with when it began: the process's
    start (``entered``) for the first, the arrival of its line for the others, and for the
    first too where ``entered`` is None (a rank that imported ahead, and says it is ready
    with no cell run). After each cell, once the rank is ready for the next, it notes how
    many cells it ran (``rank{N}.idle``): the harness starts nothing while the last cell's
    ranks still work."""
    if entered is None:
        write_json_atomically(idle_path(tree_dir, rank), 0)
    with open(fifo_path(tree_dir, rank)) as fifo:
        for done, line in enumerate(fifo):
            cell_dir = line.strip()
            if not cell_dir:
                return
            with open(current_path(tree_dir, rank), "w") as current:
                current.write(cell_dir)
            yield cell_dir, entered if done == 0 and entered is not None else time.time()
            between_cells()
            write_json_atomically(idle_path(tree_dir, rank), done + 1)


def current_cell(tree_dir: str, rank: int) -> Optional[str]:
    """The cell this rank runs now (or ran last), or None before its first."""
    try:
        with open(current_path(tree_dir, rank)) as current:
            return current.read() or None
    except FileNotFoundError:
        return None


def between_cells() -> None:
    """Let the last cell's session go, and start the peak RSS afresh for the next cell."""
    gc.collect()
    common.reset_peak_rss()
