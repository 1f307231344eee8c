"""Framework-free pieces every worker uses: the cell spec, the memory cap, fault injection,
failure classification and the per-rank report file (fields: ``scaling.schema``).

Only the standard library is imported here, so this module also runs under an interpreter that
has no harness dependencies (MXNet's own virtualenv).

Fault injection: set ``SCALING_FAULT`` to ``KIND@RANK:STEP`` (for example ``crash@1:3``) and
rank RANK injects the fault when it reaches step STEP, counting warm-up steps from 0. KIND is
``crash`` (the process kills itself with SIGKILL, as the kernel's OOM killer would), ``hang``
(the rank stops making progress) or ``error`` (the rank raises an ordinary exception).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import resource
import signal
import statistics
import sys
import time
from typing import Dict, List, Optional, Tuple

FAULT_ENV = "SCALING_FAULT"
FAULT_KINDS = ("crash", "hang", "error")

_OOM_TYPES = {"OutOfMemoryError", "ResourceExhaustedError", "MemoryError"}
_OOM_PATTERNS = re.compile(
    r"out of memory|can't allocate memory|cannot allocate memory|failed to allocate|"
    r"memory allocation failed|std::bad_alloc|OOM when allocating|ResourceExhausted",
    re.IGNORECASE,
)


def load_cell(cell_dir: str) -> Dict:
    with open(os.path.join(cell_dir, "cell.json")) as spec:
        return json.load(spec)


def process_ranks() -> Tuple[int, int, int]:
    """(global rank, local rank, world size) of this process, from the variables its launcher
    set: RANK, LOCAL_RANK, WORLD_SIZE (torchrun, the harness's spawner) or HOROVOD_RANK,
    HOROVOD_LOCAL_RANK, HOROVOD_SIZE (horovodrun); (0, 0, 1) for a process alone."""
    for prefix, size in (("", "WORLD_SIZE"), ("HOROVOD_", "HOROVOD_SIZE")):
        if f"{prefix}RANK" in os.environ:
            return (int(os.environ[f"{prefix}RANK"]), int(os.environ[f"{prefix}LOCAL_RANK"]),
                    int(os.environ[size]))
    return 0, 0, 1


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
    """``"crash@1:3"`` -> ("crash", 1, 3); None when no fault is set."""
    if not text:
        return None
    match = re.fullmatch(r"(\w+)@(\d+):(\d+)", text.strip())
    if not match or match.group(1) not in FAULT_KINDS:
        raise ValueError(
            f"bad {FAULT_ENV}={text!r}; expected KIND@RANK:STEP with KIND in {FAULT_KINDS}"
        )
    return match.group(1), int(match.group(2)), int(match.group(3))


class FaultInjector:
    def __init__(self, rank: int):
        self.fault = parse_fault(os.environ.get(FAULT_ENV))
        self.rank = rank

    def at_step(self, step: int) -> None:
        if self.fault is None or self.fault[1:] != (self.rank, step):
            return
        kind = self.fault[0]
        if kind == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        if kind == "hang":
            while True:
                time.sleep(3600)
        raise RuntimeError(f"injected fault at rank {self.rank}, step {step}")


def classify_failure(error: BaseException):
    """(status, one-line reason): ``oom`` for allocator failures, ``error`` for anything else."""
    name = type(error).__name__
    text = str(error).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first_line = lines[0] if lines else ""
    if first_line.endswith(":") and len(lines) > 1:
        first_line = lines[-1]  # a header such as TensorFlow's "in user code:"
    oom_line = next((line.strip() for line in text.splitlines() if _OOM_PATTERNS.search(line)),
                    None)
    is_oom = name in _OOM_TYPES or oom_line is not None
    line = oom_line or first_line
    reason = (line if line.startswith(f"{name}:") else f"{name}: {line}")[:300]
    return ("oom" if is_oom else "error"), reason


def step_time_summary(step_times: List[float]) -> Dict[str, float]:
    ordered = sorted(step_times)
    p95_index = max(0, min(len(ordered) - 1, int(round(0.95 * len(ordered))) - 1))
    return {"median": statistics.median(ordered), "p95": ordered[p95_index]}


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _proc_status_bytes(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def cpu_memory_headroom() -> Dict[str, Optional[int]]:
    """The capped quantity's estimated peak and the cap, for predicting where OOM starts.

    The cap applies to the data segment (VmData), which has no peak counter; the peak RSS does.
    Their difference (untouched heap minus file-backed pages) hardly changes during training, so
    peak RSS plus the difference at the end estimates the data segment's peak.
    """
    cap = resource.getrlimit(resource.RLIMIT_DATA)[0]
    data_peak = peak_rss_bytes() + _proc_status_bytes("VmData") - _proc_status_bytes("VmRSS")
    return {"capped_memory_peak_bytes": data_peak,
            "memory_capacity_bytes": None if cap == resource.RLIM_INFINITY else cap}


def report_path(cell_dir: str, rank: int) -> str:
    return os.path.join(cell_dir, f"rank{rank}.json")


def write_json_atomically(path, data) -> None:
    """A temporary file, fsync, then rename: readers see the old file or the whole new one."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as out:
        json.dump(data, out, sort_keys=True)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def write_report(cell_dir: str, rank: int, report: Dict) -> None:
    """Write ``rank{N}.json`` atomically."""
    write_json_atomically(report_path(cell_dir, rank), report)


@contextlib.contextmanager
def reporting(cell_dir: str, rank: int):
    """Collect a rank's results in a dict and write them, or the failure, as its report."""
    report: Dict = {"rank": rank, "pid": os.getpid(), "status": "ok"}

    def on_sigterm(signum, frame):
        report.update(status="terminated", error="stopped by SIGTERM", failed_at=time.time())
        write_report(cell_dir, rank, report)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield report
    except (Exception, MemoryError) as error:
        status, reason = classify_failure(error)
        report.update(status=status, error=reason, failed_at=time.time())
        write_report(cell_dir, rank, report)
        sys.stderr.write(f"rank {rank} failed: {reason}\n")
        sys.stderr.flush()
        os._exit(1)  # skip interpreter teardown, which can block in the framework's collectives
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    write_report(cell_dir, rank, report)
