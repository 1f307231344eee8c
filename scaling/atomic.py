"""Files that readers see whole or not at all: written to a temporary name, flushed to disk,
then renamed over the old one. Standard library only, so that workers under every framework's
interpreter use it too."""

from __future__ import annotations

import json
import os


def write_json_atomically(path, data) -> None:
    """A temporary file, fsync, then rename: readers see the old file or the whole new one."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as out:
        json.dump(data, out, sort_keys=True)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
