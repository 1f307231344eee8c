"""Processes in a group of their own under the cgroup v1 ``cpu`` controller: a quota slows
them, a weight puts them ahead of the rest.

Every process a cell starts runs in a session of its own, and with the kernel's autogroups the
scheduler shares the cores between sessions whatever each process's nice value is; a cgroup
holds a process and all it starts, sessions and all.
"""

from __future__ import annotations

import contextlib
import errno
from pathlib import Path

import pytest
from waiting import wait_until

CPU_CGROUPS = Path("/sys/fs/cgroup/cpu")
AHEAD_SHARES = 10 * 1024
"""Ten times the weight of any other group or session (1024): ten elevenths of a core that it
shares with one other."""


@contextlib.contextmanager
def cpu_group(name: str, **settings):
    """A fresh group ``name`` with each ``cpu.KEY`` file of ``settings`` written, in that
    order; yields its folder. On leaving, the processes still in it go back to the root group
    and the group is removed. Skips the test where the controller cannot be written."""
    group = CPU_CGROUPS / name
    try:
        group.mkdir()
    except OSError as error:
        pytest.skip(f"no writable cgroup cpu controller: {error}")
    try:
        for key, value in settings.items():
            (group / f"cpu.{key}").write_text(str(value))
        yield group
    finally:
        wait_until(lambda: _emptied_and_removed(group), f"{group} emptied and removed",
                   timeout=60)


def _emptied_and_removed(group: Path) -> bool:
    """Move every process still in ``group`` back to the root group, then remove it; False
    while the kernel refuses, as a process there started another since it was read, or has
    not yet left after its exit."""
    for left in (group / "cgroup.procs").read_text().split():
        with contextlib.suppress(OSError):
            (CPU_CGROUPS / "cgroup.procs").write_text(left)
    try:
        group.rmdir()
    except OSError as error:
        if error.errno != errno.EBUSY:
            raise
        return False
    return True


def join(group: Path) -> None:
    """Move the calling process into ``group``: what it starts from then on is there too."""
    (group / "cgroup.procs").write_text("0")
