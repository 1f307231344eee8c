"""The results store: each cell's ``cells/CELL/record.json``, and ``results.jsonl``, the index a
notebook reads, one line per finished cell.

Several writers may add to one store at once: array tasks on one node, or on several nodes over a
shared file system. Each append takes an exclusive lock on ``results.jsonl.lock`` (``flock``,
which Linux's NFS client maps onto POSIX locks), cuts off a line that a killed writer left
unfinished, writes the whole line with one ``write`` and fsyncs before it lets go. A damaged line
elsewhere is skipped with a one-line warning naming its line number, so its cell counts as not
recorded and a resumed sweep runs it again.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

RESULTS_FILE = "results.jsonl"
LOCK_SUFFIX = ".lock"

log = logging.getLogger("scaling")
_warned: Set[Tuple[str, int]] = set()


class ResultStore:
    def __init__(self, out_dir):
        self.dir = Path(out_dir)
        self.path = self.dir / RESULTS_FILE

    def records(self) -> List[Dict]:
        return list(self._read())

    def _read(self) -> Iterator[Dict]:
        if not self.path.exists():
            return
        with open(self.path) as lines:
            for number, line in enumerate(lines, start=1):
                if not line.endswith("\n"):
                    return  # an append in progress, or cut short by a kill
                try:
                    record = json.loads(line)
                except ValueError:
                    record = None
                if not isinstance(record, dict) or "cell" not in record:
                    self._warn_damaged(number)
                    continue
                yield record

    def _warn_damaged(self, number: int) -> None:
        key = (str(self.path.resolve()), number)
        if key not in _warned:
            _warned.add(key)
            log.warning("%s line %d is damaged and was skipped; its cell counts as not recorded",
                        self.path, number)

    def done(self) -> Dict[str, Dict]:
        """Recorded cells by cell id."""
        return {record["cell"]: record for record in self._read()}

    def append(self, record: Dict) -> None:
        locked_append(self.path, record)

    def append_once(self, record: Dict) -> bool:
        """Append ``record`` unless its cell is already recorded; True if it was appended. The
        check and the append hold one lock, so two attempts at a cell (a requeued array task, a
        second submission) record it once."""
        with locked(self.path):
            if record["cell"] in self.done():
                return False
            _append_line(self.path, record)
            return True


@contextlib.contextmanager
def locked(path: Path):
    """An exclusive lock on ``PATH.lock`` (flock)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(path.name + LOCK_SUFFIX), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def locked_append(path: Path, record: Dict) -> None:
    """Append one JSON line to ``path`` under its lock, after cutting off a line that a killed
    writer left unfinished; one write, fsynced."""
    with locked(Path(path)):
        _append_line(Path(path), record)


def _append_line(path: Path, record: Dict) -> None:
    _drop_partial_line(path)
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, line)
        if written != len(line):
            raise OSError(f"short write to {path}: {written} of {len(line)} bytes")
        os.fsync(fd)
    finally:
        os.close(fd)


def _drop_partial_line(path: Path) -> None:
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as data:
        content = data.read()
        if content.endswith(b"\n"):
            return
        data.truncate(content.rfind(b"\n") + 1)
        os.fsync(data.fileno())
