"""Framework-free pieces every worker uses: the cell spec, the memory cap, fault injection,
failure classification and the per-rank report file (fields: ``scaling.schema``).

Only the standard library is imported here, so this module also runs under an interpreter that
has no harness dependencies (MXNet's own virtualenv).

Fault injection: set ``SCALING_FAULT`` to ``KIND@RANK:STEP`` (for example ``crash@1:3``) and
rank RANK injects the fault when it reaches step STEP, counting warm-up steps from 0. KIND is
``crash`` (the process kills itself with SIGKILL, as the kernel's OOM killer would), ``hang``
(the rank stops making progress) or ``error`` (the rank raises an ordinary exception).
``KIND@RANK:STEP:BATCH`` injects it only in cells of that per-device batch size (one cell of
a shared process tree, say).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import json
import os
import re
import resource
import signal
import socket
import statistics
import sys
import time
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from scaling.atomic import write_json_atomically

NODE_NAME_ENV = ("SCALING_NODE_NAME", "SLURMD_NODENAME")
"""Where a rank finds its node's name, the first set wins: a backend that names its nodes
otherwise than by host name sets ``SCALING_NODE_NAME`` in its ranks' environment (a Ray node,
say); Slurm's slurmd sets ``SLURMD_NODENAME`` in every task it starts, which the launchers'
ranks inherit. Without either, the host name (``node_name``)."""

USER_CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                          "scaling")
"""The harness's per-user cache folder, as pip keeps its wheels: what does not change between
runs (FLOP counts, JAX's compiled initialisers)."""

FAULT_ENV = "SCALING_FAULT"
FAULT_KINDS = ("crash", "hang", "error")

_OOM_TYPES = {"OutOfMemoryError", "ResourceExhaustedError", "MemoryError"}
_OOM_PATTERNS = re.compile(
    r"out of memory|can't allocate memory|cannot allocate memory|failed to allocate|"
    r"memory allocation failed|std::bad_alloc|OOM when allocating|Resource_?Exhausted",
    re.IGNORECASE,
)

CAP_MARGIN = 0.01
"""A failure under the heap cap is ``oom`` when the data segment's peak came within this
fraction of the cap."""


def load_cell(cell_dir: str) -> Dict:
    with open(os.path.join(cell_dir, "cell.json")) as spec:
        return json.load(spec)


RANK_VARIABLES = (("RANK", "LOCAL_RANK", "WORLD_SIZE"),
                  ("HOROVOD_RANK", "HOROVOD_LOCAL_RANK", "HOROVOD_SIZE"),
                  ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"),
                  ("PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE"))
"""(rank, local rank, world size) variables, by launcher: torchrun and the harness's spawner
(which also starts TensorFlow's workers), horovodrun with gloo, Open MPI, and MPICH or Intel MPI."""


def process_ranks(environ: Optional[Mapping[str, str]] = None) -> Tuple[int, int, int]:
    """(global rank, local rank, world size) of a process, from the variables its launcher set
    (``RANK_VARIABLES``), read from ``environ`` (this process's environment by default);
    (0, 0, 1) for a process alone."""
    environ = os.environ if environ is None else environ
    for rank, local_rank, size in RANK_VARIABLES:
        if rank in environ:
            return (int(environ[rank]), int(environ.get(local_rank, 0)),
                    int(environ.get(size, 1)))
    return 0, 0, 1


def stop_horovod_timeline() -> None:
    """Under ``HOROVOD_TIMELINE``, stop the timeline of whichever Horovod this process loaded.
    Horovod's shutdown (``hvd.shutdown()`` or at exit) drops the events its writer thread has
    not written yet, many on a busy machine; ``stop_timeline`` waits until it has."""
    if os.environ.get("HOROVOD_TIMELINE"):
        for name in ("horovod.torch", "horovod.tensorflow", "horovod.mxnet"):
            if name in sys.modules:
                sys.modules[name].stop_timeline()


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies, so no rank outlives its launcher."""
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)


def apply_memory_limit(limit_bytes: Optional[int]) -> None:
    """Cap the heap (RLIMIT_DATA) so over-allocation fails inside the framework's allocator.

    Must run before the framework is imported. RLIMIT_AS would also count the large virtual
    mappings that GPU builds reserve at start-up; RLIMIT_DATA is closer to device memory.
    """
    if limit_bytes:
        resource.setrlimit(resource.RLIMIT_DATA, (limit_bytes, limit_bytes))


def parse_fault(text: Optional[str]):
    """``"crash@1:3"`` -> ("crash", 1, 3, None), ``"crash@1:3:8"`` -> ("crash", 1, 3, 8);
    None when no fault is set."""
    if not text:
        return None
    match = re.fullmatch(r"(\w+)@(\d+):(\d+)(?::(\d+))?", text.strip())
    if not match or match.group(1) not in FAULT_KINDS:
        raise ValueError(f"bad {FAULT_ENV}={text!r}; expected KIND@RANK:STEP[:BATCH] with KIND "
                         f"in {FAULT_KINDS}")
    batch = match.group(4)
    return (match.group(1), int(match.group(2)), int(match.group(3)),
            None if batch is None else int(batch))


class FaultInjector:
    def __init__(self, rank: int, batch_size: int):
        self.fault = parse_fault(os.environ.get(FAULT_ENV))
        if self.fault and self.fault[3] not in (None, batch_size):
            self.fault = None
        self.rank = rank

    def at_step(self, step: int) -> None:
        if self.fault is None or self.fault[1:3] != (self.rank, step):
            return
        kind = self.fault[0]
        if kind == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        if kind == "hang":
            while True:
                time.sleep(3600)
        raise RuntimeError(f"injected fault at rank {self.rank}, step {step}")


def classify_failure(error: BaseException, memory: Optional[Dict] = None,
                     allocation_failed: bool = False) -> Tuple[str, str, Optional[str]]:
    """(status, one-line reason, evidence): ``oom`` only on evidence that memory ran out,
    ``error`` with no evidence for anything else.

    The evidence is the framework's own out-of-memory error ("framework error: ..."), or, for a
    failure of any other kind under the heap cap, what :func:`cap_evidence` finds in ``memory``
    (:func:`memory_at_failure`) and ``allocation_failed``. Nothing else makes a failure ``oom``.
    """
    name = type(error).__name__
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    first_line = lines[0] if lines else ""
    if first_line.endswith(":") and len(lines) > 1:
        first_line = lines[-1]  # a header such as TensorFlow's "in user code:"
    oom_line = next((line for line in lines if _OOM_PATTERNS.search(line)), None)
    line = oom_line or first_line
    reason = (line if line.startswith(f"{name}:") else f"{name}: {line}")[:300]
    if name in _OOM_TYPES or oom_line is not None:
        return "oom", reason, f"framework error: {reason}"
    evidence = cap_evidence(memory, allocation_failed)
    return ("oom" if evidence else "error"), reason, evidence


def cap_evidence(memory: Optional[Dict], allocation_failed: bool) -> Optional[str]:
    """Why a failure under the heap cap ran out of memory, or None without a cap or a sign.

    Either an allocation had just failed (``errno`` was ENOMEM when the error arrived: a
    framework may report the failure in its own words, as oneDNN's "could not execute a
    primitive" does when its workspace does not fit), or the capped peak in ``memory`` came
    within ``CAP_MARGIN`` of the cap.
    """
    if not memory or memory.get("memory_capacity_bytes") is None:
        return None
    peak, cap = memory["capped_memory_peak_bytes"], memory["memory_capacity_bytes"]
    if allocation_failed:
        return f"an allocation failed (ENOMEM) under the {_gib(cap)} cap, peak {_gib(peak)}"
    if peak >= cap * (1 - CAP_MARGIN):
        return f"peak {_gib(peak)} reached the {_gib(cap)} cap"
    return None


def _gib(size: int) -> str:
    return f"{size / 2**30:.3g} GiB"


def step_time_summary(step_times: List[float]) -> Dict[str, float]:
    ordered = sorted(step_times)
    p95_index = max(0, min(len(ordered) - 1, int(round(0.95 * len(ordered))) - 1))
    return {"median": statistics.median(ordered), "p95": ordered[p95_index]}


def _proc_status_bytes(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def peak_rss_bytes() -> int:
    """This process's peak RSS (VmHWM) since its start or the last :func:`reset_peak_rss`.
    Not ``ru_maxrss``: Linux keeps that across exec, so a worker started by a large parent
    would report the parent's peak as its own."""
    return _proc_status_bytes("VmHWM")


_PEAK_RESET = []
"""Non-empty once :func:`reset_peak_rss` ran: VmPeak, which nothing resets, no longer belongs to
the cell that runs now."""


def reset_peak_rss() -> None:
    """Start VmHWM afresh (Linux's ``clear_refs`` 5), for the next cell of a shared process
    tree."""
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")
    _PEAK_RESET.append(True)


def cpu_memory_headroom() -> Dict[str, Optional[int]]:
    """The capped quantity's estimated peak and the cap, for predicting where OOM starts.

    The cap applies to the data segment (VmData), which has no peak counter. Two counters each
    give a floor under its peak, and the estimate is the higher: the peak RSS (VmHWM) plus the
    data segment's untouched part at the end, and the peak of the whole address space (VmPeak)
    less what is not data at the end (mappings of files and the stack, which training does
    not unmap). Buffers mapped for a step and freed before they are all touched, such as
    oneDNN's scratchpads, reach the second and not the first: at the edge of a 2 GiB cap the
    first falls about 50 MB short of the peak that fails.
    """
    cap = resource.getrlimit(resource.RLIMIT_DATA)[0]
    data, rss = _proc_status_bytes("VmData"), _proc_status_bytes("VmRSS")
    not_data = _proc_status_bytes("VmSize") - data
    data_peak = peak_rss_bytes() + data - rss
    if not _PEAK_RESET:  # after a reset, VmPeak may be an earlier cell's
        data_peak = max(data_peak, _proc_status_bytes("VmPeak") - not_data)
    return {"capped_memory_peak_bytes": data_peak,
            "memory_capacity_bytes": None if cap == resource.RLIM_INFINITY else cap}


def memory_at_failure() -> Dict[str, int]:
    """Under the heap cap, :func:`cpu_memory_headroom` as a failure left it; empty without a
    cap (frameworks that cap their own allocator raise their own out-of-memory error)."""
    if resource.getrlimit(resource.RLIMIT_DATA)[0] == resource.RLIM_INFINITY:
        return {}
    return cpu_memory_headroom()


@functools.lru_cache(maxsize=None)
def _errno_location():
    """glibc's ``__errno_location`` (a library loaded with ctypes' ``use_errno`` would swap in
    its own copy), or None elsewhere."""
    location = getattr(ctypes.CDLL(None), "__errno_location", None)
    if location is not None:
        location.restype = ctypes.POINTER(ctypes.c_int)
    return location


def errno_reader() -> Callable[[], int]:
    """A function that reads the calling thread's C ``errno``; 0 elsewhere."""
    location = _errno_location()
    return (lambda: location()[0]) if location else (lambda: 0)


def clear_errno() -> None:
    """Set the calling thread's ``errno`` to 0. C calls set it on failure and never clear it,
    so an allocation that failed and was handled long ago would otherwise still read as
    ENOMEM when an unrelated error arrives: the worker clears it before every step."""
    location = _errno_location()
    if location:
        location()[0] = 0


def node_name(environ: Optional[Mapping[str, str]] = None) -> str:
    """This process's node, by the name its backend gives it (``NODE_NAME_ENV``), else its
    host name: nodes that share a host name (containers, VMs cloned alike) stay apart."""
    environ = os.environ if environ is None else environ
    return next((environ[name] for name in NODE_NAME_ENV if environ.get(name)),
                socket.gethostname())


def report_path(cell_dir: str, rank: int) -> str:
    return os.path.join(cell_dir, f"rank{rank}.json")


def write_report(cell_dir: str, rank: int, report: Dict) -> None:
    """Write ``rank{N}.json`` atomically."""
    write_json_atomically(report_path(cell_dir, rank), report)


@contextlib.contextmanager
def reporting(cell_dir: str, rank: int):
    """Collect a rank's results in a dict and write them, or the failure, as its report."""
    report: Dict = {"rank": rank, "pid": os.getpid(), "node": node_name(), "status": "ok"}

    def on_sigterm(signum, frame):
        report.update(status="terminated", error="stopped by SIGTERM", failed_at=time.time())
        write_report(cell_dir, rank, report)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, on_sigterm)
    read_errno = errno_reader()
    clear_errno()
    try:
        yield report
    except (Exception, MemoryError) as error:
        allocation_failed = read_errno() == errno.ENOMEM  # before any other call can set it
        memory = memory_at_failure()
        status, reason, evidence = classify_failure(error, memory, allocation_failed)
        report.update(memory, status=status, error=reason, oom_evidence=evidence,
                      failed_at=time.time())
        write_report(cell_dir, rank, report)
        sys.stderr.write(f"rank {rank} failed: {reason}\n")
        sys.stderr.flush()
        os._exit(1)  # skip interpreter teardown, which can block in the framework's collectives
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    write_report(cell_dir, rank, report)


def watch_for_signals(cell_now: Callable[[], Optional[str]], rank: int) -> None:
    """Fork: the child goes on as the rank; this process waits for it and, if a signal killed
    it before it reported (SIGKILL from the kernel's OOM killer, SIGSEGV), writes its report
    in the cell it was running (``cell_now()``): ``crashed``, naming the signal. The parent
    then dies the same way, so the launcher sees what it would have seen. Signals that stop the
    rank are passed on to the child."""
    child = os.fork()
    if child == 0:
        die_with_parent()
        return
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda received, frame: os.kill(child, received))
    _, status = os.waitpid(child, 0)
    if os.WIFSIGNALED(status):
        signum, cell_dir = os.WTERMSIG(status), cell_now()
        if cell_dir and not os.path.exists(report_path(cell_dir, rank)):
            write_report(cell_dir, rank, {
                "rank": rank, "pid": child, "host": socket.gethostname(), "status": "crashed",
                "error": f"killed by {signal.Signals(signum).name}", "failed_at": time.time(),
            })
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)
