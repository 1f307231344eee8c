"""Starting a cell's process tree and making sure none of it outlives the cell.

Every process of a cell inherits ``SCALING_CELL_TOKEN``; launchers such as torchrun put their
workers in new sessions, so the token, not the process group, is how the whole tree is found.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

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


class WorkerFailed(Exception):
    """A worker that wrote no result: its ``status`` (``timeout`` or ``crashed``) and why."""

    def __init__(self, status: str, error: str):
        super().__init__(error)
        self.status = status


def run_json_worker(python: str, module: str, spec: Dict, env: Dict[str, str],
                    timeout_s: float) -> Any:
    """``python -m MODULE SPEC OUT`` in a scratch folder: ``spec`` goes in as JSON, and what
    the process wrote to OUT comes back; :class:`WorkerFailed` when it wrote nothing."""
    with tempfile.TemporaryDirectory() as scratch:
        spec_path, out = Path(scratch) / "spec.json", Path(scratch) / "out.json"
        spec_path.write_text(json.dumps(spec))
        try:
            done = subprocess.run([python, "-m", module, str(spec_path), str(out)], env=env,
                                  capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise WorkerFailed("timeout", f"no result within {timeout_s:g} s") from None
        if done.returncode != 0 or not out.exists():
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise WorkerFailed("crashed", f"worker exit code {done.returncode}: {last}")
        return json.loads(out.read_text())
