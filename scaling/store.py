"""The results store: ``results.jsonl``, one line per finished cell, appended durably.

Each line is written with a single ``write`` on a file opened for appending, then fsynced.
A line cut short by a kill is ignored when the store is read and is overwritten by the next
append, so a resumed sweep neither loses nor repeats a cell.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Dict, Iterator, List

RESULTS_FILE = "results.jsonl"


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
            for line in lines:
                if not line.endswith("\n"):
                    return
                yield json.loads(line)

    def done(self) -> Dict[str, Dict]:
        """Recorded cells by cell id."""
        return {record["cell"]: record for record in self._read()}

    def append(self, record: Dict) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._drop_partial_line()
        line = (json.dumps(record, sort_keys=True) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _drop_partial_line(self) -> None:
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        with open(self.path, "rb+") as data:
            content = data.read()
            if content.endswith(b"\n"):
                return
            data.truncate(content.rfind(b"\n") + 1)
            os.fsync(data.fileno())
