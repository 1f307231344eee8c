"""Starting a cell's process tree and making sure none of it outlives the cell.

Every process of a cell inherits ``SCALING_CELL_TOKEN``; launchers such as torchrun put their
workers in new sessions, so the token, not the process group, is how the whole tree is found.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from typing import Callable, Dict, List, Optional, Tuple

import psutil

from scaling import PROJECT_ROOT
from scaling.workers.common import die_with_parent

TOKEN_ENV = "SCALING_CELL_TOKEN"


def worker_env(*overrides: Dict[str, str]) -> Dict[str, str]:
    """This process's environment with the harness's packages on ``PYTHONPATH`` (workers run
    under other interpreters too), then ``overrides`` in order."""
    pythonpath = os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": pythonpath}
    for override in overrides:
        env.update(override)
    return env


def cell_processes(token: str) -> List[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(TOKEN_ENV) == token:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def kill_cell_processes(token: str, grace_s: float = 5.0) -> None:
    """SIGTERM every process of the cell, wait up to ``grace_s``, then SIGKILL what is left."""
    procs = cell_processes(token)
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive + cell_processes(token):
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(alive, timeout=grace_s)


def run_process_tree(
    argv: List[str], env: Dict[str, str], token: str, log_path: str, timeout_s: float,
    on_start: Optional[Callable[[int], None]] = None,
) -> Tuple[Optional[int], bool, float]:
    """Run ``argv`` in its own session with output to ``log_path``; ``on_start`` gets its pid.

    Returns (exit code, timed out, seconds). On timeout, or if anything of the tree is left when
    the launcher exits, the whole tree is killed.
    """
    started = time.monotonic()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            argv, env={**env, TOKEN_ENV: token}, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=die_with_parent,
        )
        if on_start:
            on_start(proc.pid)
        try:
            returncode, timed_out = proc.wait(timeout=timeout_s), False
        except subprocess.TimeoutExpired:
            returncode, timed_out = None, True
        finally:
            kill_cell_processes(token)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return returncode, timed_out, time.monotonic() - started
