"""Shared process trees: cells that would start the same processes run one after another in
one launch, which saves each later cell the interpreter's start, the imports, the launcher's
agent and the rendezvous (``scaling.workers.tree`` is the ranks' side).

Cells share a tree when their launch is the same apart from the folder and the rendezvous port:
the same interpreter, launcher command and environment (framework, launcher, devices, threads,
options' variables). Only where the framework's worker can keep its processes for several
cells (:data:`SHARED`, by data-parallel mechanism), for sweep cells on one node without a memory
cap: VmPeak, which a cap's figures rest on, cannot start afresh in a process.

The cells' order does not change. A sweep keeps one tree per kind of cell and sends each cell to
its kind's tree when its turn comes; the other trees wait, blocked on their FIFOs, using no CPU.
On CPUs the trees of the sweep's first kinds (:meth:`SharedTrees.plan`) start together, in its
first shared cell, each rank importing its framework at once: a start spends a core on imports
alone, and the machine's other cores would sit idle through it. The first cell starts once every
one of them is ready, so nothing of them runs beside a window. A GPU cell runs with no other
kind's tree left (their CUDA contexts would sit on its devices), so on GPUs a tree serves the
cells of one kind that run one after another. A cell is done when every rank reported and is
ready for the next, so nothing of it runs beside the next cell. A failed cell (an error, an OOM,
a crash) ends its tree, and a cell past its timeout has its tree killed: the cell is recorded
from its reports as a cell alone would be, and its kind's next cell starts a new tree. The trees
end with the sweep, on Ctrl-C, or when the harness dies (each rank reads the end of its FIFO).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from scaling.cell import Cell
from scaling.execute.processes import TOKEN_ENV, kill_cell_processes
from scaling.placement import Placement
from scaling.workers.common import die_with_parent
from scaling.workers.tree import TREE_FILE, fifo_path, idle_path

SHARED = {"torch": ("none", "ddp")}
"""Framework -> the data-parallel mechanisms whose processes run several cells."""
MAX_TREES = 4
"""Trees kept waiting at most; the one used least recently ends first."""
POLL_S = 0.05
"""How often the harness looks for a cell's reports."""
CLOSE_S = 10.0
"""How long a closed tree is given to exit before it is killed."""


def shareable(cell: Cell, placement: Placement) -> bool:
    """Whether ``cell`` may run in a shared tree (module doc)."""
    return (cell.data_parallel in SHARED.get(cell.framework, ()) and cell.purpose == "sweep"
            and placement.nodes == 1 and cell.memory_limit is None)


@dataclasses.dataclass(frozen=True)
class Launch:
    """How a kind of cell starts its tree: ``command(folder)`` in ``env`` starts ``ranks``
    processes; ``key`` is what every cell of the kind has in common."""

    key: Tuple
    command: Callable[[str], List[str]]
    env: Dict[str, str]
    ranks: int


@dataclasses.dataclass
class Tree:
    """One launch that runs cells in turn; its ranks read their cells from FIFOs in
    ``folder``."""

    folder: Path
    process: subprocess.Popen
    token: str
    log_path: Path
    fifos: List[int]
    cells: int = 0

    def send(self, line: str) -> None:
        for fd in self.fifos:
            os.write(fd, (line + "\n").encode())

    def alive(self) -> bool:
        return self.process.poll() is None

    def hang_up(self) -> None:
        """Close the FIFOs: each rank reads their end and exits."""
        for fd in self.fifos:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fifos = []

    def end(self, grace_s: float = CLOSE_S) -> Optional[int]:
        """:meth:`hang_up`, give the tree ``grace_s``, and kill what is left; the launcher's
        exit code."""
        self.hang_up()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=grace_s)
        kill_cell_processes(self.token)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        return self.process.wait()

    def close(self, grace_s: float = CLOSE_S) -> None:
        """End the tree and remove its folder."""
        self.end(grace_s)
        shutil.rmtree(self.folder, ignore_errors=True)


class SharedTrees:
    """The trees of one sweep, by kind of cell: ``with SharedTrees(out_dir) as trees``."""

    def __init__(self, out_dir):
        self.root = Path(out_dir) / "trees"
        self.trees: Dict[Tuple, Tree] = {}
        self.planned: List[Launch] = []

    def __enter__(self) -> "SharedTrees":
        """Start with no tree folders: what a sweep killed outright left is gone with it."""
        shutil.rmtree(self.root, ignore_errors=True)
        return self

    def __exit__(self, kind, error, traceback) -> None:
        """End every tree: all told at once, and given :data:`CLOSE_S` to leave after the
        sweep, none after Ctrl-C or an error."""
        self.close_all(grace_s=CLOSE_S if kind is None else 0.0)
        with contextlib.suppress(OSError):
            self.root.rmdir()

    def close_all(self, grace_s: float = CLOSE_S) -> None:
        """End every tree: all told at once, then each given ``grace_s`` to leave."""
        for tree in self.trees.values():
            tree.hang_up()
        for tree in self.trees.values():
            tree.close(grace_s)
        self.trees.clear()

    def plan(self, launches: List[Launch]) -> None:
        """Start these kinds' trees together with the first cell's (at most
        :data:`MAX_TREES`, CPU cells only: module doc)."""
        self.planned = launches[:MAX_TREES]

    def run(self, launch: Launch, cell_dir: Path, log_path: Path, timeout_s: float,
            on_start: Callable[[int], None], alone: bool = False
            ) -> Tuple[Optional[int], bool, float, Dict]:
        """Run the cell of ``cell_dir`` in its kind's tree, started by ``launch`` where there
        is none: (exit code, timed out, seconds) as
        :func:`scaling.execute.processes.run_process_tree` gives them, and the tree (its id,
        the cell's position in it, and its processes' ``token``). ``alone``: end the other
        kinds' trees first (a GPU cell: their idle contexts would sit on its devices). The
        trees that start together in the first cell have ``timeout_s`` to be ready, and the
        cell its own ``timeout_s`` after them."""
        started = time.monotonic()
        if self.planned and not alone:
            self.start_planned(launch, started + timeout_s)
        deadline = time.monotonic() + timeout_s
        tree = self.trees.pop(launch.key, None)
        if alone:
            self.close_all()
        if tree is not None and not tree.alive():
            tree.close()
            tree = None
        if tree is None:
            tree = self.start(launch)
        self.trees[launch.key] = tree
        self.evict()
        on_start(tree.process.pid)
        offset = tree.log_path.stat().st_size
        tree.cells += 1
        tree.send(str(cell_dir))
        returncode, timed_out = self.wait(tree, cell_dir, launch.ranks, deadline)
        with open(tree.log_path, "rb") as log, open(log_path, "ab") as own:
            log.seek(offset)
            own.write(log.read())
        if not tree.fifos:  # it ended
            del self.trees[launch.key]
            tree.close()
        return returncode, timed_out, time.monotonic() - started, {
            "tree": tree.token[:12], "position": tree.cells, "token": tree.token}

    def start_planned(self, first: Launch, deadline: float) -> None:
        """Start the planned kinds' trees (``first``'s among them) at once, each rank importing
        its framework before it waits for a cell, and wait until every rank of each is ready
        for its first cell, its tree ended, or ``deadline`` passed; a tree that ended, or is not
        ready by then, is closed, and its kind starts another when its turn comes."""
        launches = [launch for launch in self.planned if launch.key != first.key]
        self.planned = []
        started = [(launch.key, self.start(launch, preload=True)) for launch in
                   [first, *launches][:MAX_TREES]]
        while time.monotonic() < deadline and any(tree.alive() and not ready(tree)
                                                  for _, tree in started):
            time.sleep(POLL_S)
        for key, tree in started:
            if tree.alive() and ready(tree):
                self.trees[key] = tree
            else:
                tree.close(grace_s=0.0)

    def start(self, launch: Launch, preload: bool = False) -> Tree:
        """A new tree of ``launch``; with ``preload``, its ranks import their framework first
        and say when they are ready (``scaling.workers.tree``)."""
        token = uuid.uuid4().hex
        folder = self.root / token[:12]
        folder.mkdir(parents=True)
        (folder / TREE_FILE).write_text(json.dumps({"ranks": launch.ranks, "preload": preload}))
        fifos = []
        for rank in range(launch.ranks):
            os.mkfifo(fifo_path(str(folder), rank))
            fifos.append(os.open(fifo_path(str(folder), rank), os.O_RDWR))
        log_path = folder / "launcher.log"
        with open(log_path, "ab") as log:
            process = subprocess.Popen(
                launch.command(str(folder)), env={**launch.env, TOKEN_ENV: token}, stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                preexec_fn=die_with_parent)
        return Tree(folder, process, token, log_path, fifos)

    def wait(self, tree: Tree, cell_dir: Path, ranks: int, deadline: float
             ) -> Tuple[Optional[int], bool]:
        """Until every rank reported ok and is ready for the next cell (the tree goes on:
        (0, False)), the tree ended or a rank failed (the tree ends: its exit code), or
        ``deadline`` passed (the tree is killed: (None, True))."""
        while True:
            reports = [json.loads(path.read_text()) for path in cell_dir.glob("rank*.json")]
            if any(report["status"] != "ok" for report in reports) or not tree.alive():
                return tree.end(grace_s=max(0.0, deadline - time.monotonic())), False
            if len(reports) == ranks and ready(tree):
                return 0, False
            if time.monotonic() > deadline:
                tree.end(grace_s=0.0)
                return None, True
            time.sleep(POLL_S)

    def evict(self) -> None:
        """End the trees used least recently beyond :data:`MAX_TREES`."""
        while len(self.trees) > MAX_TREES:
            oldest = next(iter(self.trees))
            self.trees.pop(oldest).close()


def ready(tree: Tree) -> bool:
    """Whether every rank of ``tree`` waits for its next cell."""
    return all(idle(tree, rank) for rank in range(len(tree.fifos)))


def idle(tree: Tree, rank: int) -> bool:
    """Whether ``rank`` of ``tree`` ran its cells so far and waits for the next."""
    try:
        return json.loads(Path(idle_path(str(tree.folder), rank)).read_text()) == tree.cells
    except (FileNotFoundError, ValueError):
        return False
