"""Asking Slurm: every ``squeue``, ``scontrol``, ``sacct`` and ``sbatch`` call, and strict
parsing of what each answers.

A call that cannot be made (the command is not on PATH), that fails (non-zero exit) or that
does not answer in time raises :class:`InfrastructureError`, as does an answer that is not what
was asked for: a failed question is never read as an empty queue, and no record is ever made
from one.
"""

from __future__ import annotations

import re
import subprocess
from typing import Collection, Dict, List, Optional, Tuple

from scaling.errors import InfrastructureError

CALL_TIMEOUT_S = 60.0
"""How long one Slurm command may take before the call counts as failed."""
UNREACHABLE = "could not ask the Slurm controller"
NO_ACCOUNTING = "accounting storage is disabled"

_SBATCH_ID = re.compile(r"^([0-9]+)(;[^;\s]+)?$")
_SQUEUE_ID = re.compile(r"^(\d+)_(\d+)$")
_FIELD = re.compile(r"\b(JobId|ArrayJobId|ArrayTaskId|JobName|JobState|Reason|ExitCode)=(\S*)")


def one_line(text: str) -> str:
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def run(argv: List[str], failing: str) -> subprocess.CompletedProcess:
    """``argv``'s completed process, whatever its exit status; ``failing`` starts the message
    when it cannot be run or does not answer in time."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=CALL_TIMEOUT_S)
    except FileNotFoundError:
        raise InfrastructureError(f"{failing}: {argv[0]} is not on PATH") from None
    except subprocess.TimeoutExpired:
        raise InfrastructureError(
            f"{failing}: {argv[0]} did not answer within {CALL_TIMEOUT_S:g} s") from None


def call(argv: List[str], failing: str = UNREACHABLE) -> str:
    """What ``argv`` printed, when it exited 0."""
    return printed(run(argv, failing), failing)


def printed(result: subprocess.CompletedProcess, failing: str) -> str:
    """The standard output of ``result``, a command that must have exited 0."""
    if result.returncode != 0:
        raise InfrastructureError(f"{failing}: {result.args[0]} exited {result.returncode}: "
                                  f"{one_line(result.stderr) or 'it said nothing'}")
    return result.stdout


def parse_job_id(text: str) -> str:
    """The job id that ``sbatch --parsable`` printed: ``ID`` or ``ID;CLUSTER``."""
    match = _SBATCH_ID.match(text.strip())
    if match is None:
        raise InfrastructureError(f"sbatch answered {text.strip()!r} where a job id was due")
    return match.group(1)


def sbatch(argv: List[str], name: str) -> str:
    """Submit; the job id."""
    return parse_job_id(call(argv, failing=f"could not submit {name}"))


def parse_squeue(text: str) -> Dict[Tuple[str, int], str]:
    """``squeue -r -o %i|%T`` lines -> {(array job id, task index): Slurm state}."""
    tasks = {}
    for line in filter(str.strip, text.splitlines()):
        job, _, state = line.partition("|")
        match = _SQUEUE_ID.match(job.strip())
        if match is None or not state.strip():
            raise InfrastructureError(f"squeue answered {line.strip()!r} where an array task "
                                      "and its state were due")
        tasks[(match.group(1), int(match.group(2)))] = state.strip()
    return tasks


def squeue_tasks(names: Collection[str]) -> Dict[Tuple[str, int], str]:
    """(array job id, task index) -> Slurm state, for every queued array task of the jobs
    named ``names``."""
    if not names:
        return {}
    return parse_squeue(call(["squeue", "-h", "-r", f"--name={','.join(sorted(names))}",
                              "-o", "%i|%T"]))


def parse_scontrol(text: str) -> Tuple[Dict[Tuple[str, int], Dict], Dict[str, str]]:
    """``scontrol show job -o`` -> array tasks by (array job id, index), and array job ids by
    job name."""
    tasks, names = {}, {}
    for line in text.splitlines():
        fields = dict(_FIELD.findall(line))
        if "ArrayJobId" not in fields:
            continue
        if not fields["ArrayJobId"].isdigit():
            raise InfrastructureError(f"scontrol answered ArrayJobId={fields['ArrayJobId']!r} "
                                      f"for job {fields.get('JobId')!r}")
        names[fields.get("JobName", "")] = fields["ArrayJobId"]
        for index in task_indices(fields.get("ArrayTaskId", "")):
            tasks[(fields["ArrayJobId"], index)] = fields
    return tasks, names


def scontrol_jobs() -> Tuple[Dict[Tuple[str, int], Dict], Dict[str, str]]:
    """Every array job the controller remembers (it keeps finished ones for ``MinJobAge``):
    tasks by (array job id, index), and array job ids by job name (to find a submission whose
    id was never noted)."""
    return parse_scontrol(call(["scontrol", "show", "job", "-o"]))


def task_indices(text: str) -> List[int]:
    """``3`` -> [3]; ``2-4,7%2`` (tasks that never started, kept as one record) -> [2, 3, 4, 7]."""
    indices = []
    for part in text.split("%")[0].split(","):
        first, _, last = part.split(":")[0].partition("-")
        if first.isdigit() and (not last or last.isdigit()):
            indices.extend(range(int(first), int(last or first) + 1))
    return indices


def ping() -> None:
    """Nothing when the controller answers; :class:`InfrastructureError` when it does not."""
    call(["scontrol", "ping"])


def node_cpus(partition: Optional[str] = None) -> int:
    """The CPUs of the smallest compute node (of ``partition``, else of every partition): what
    a cell's node has, whichever node Slurm picks."""
    argv = ["sinfo", "-h", "-N", "-o", "%c", *([f"--partition={partition}"] if partition else [])]
    counts = call(argv).split()
    if not counts:
        raise InfrastructureError("Slurm lists no nodes" +
                                  (f" in partition {partition!r}" if partition else ""))
    if not all(count.isdigit() for count in counts):
        raise InfrastructureError(f"sinfo answered {' '.join(counts)!r} where the CPUs of "
                                  "each node were due")
    return min(map(int, counts))


def node_names(partition: Optional[str] = None) -> List[str]:
    """The compute nodes (of ``partition``, else of every partition), sorted."""
    argv = ["sinfo", "-h", "-N", "-o", "%N", *([f"--partition={partition}"] if partition else [])]
    return sorted(set(call(argv).split()))


def running_jobs(nodelist: str) -> List[str]:
    """The jobs running on the nodes of ``nodelist``, as squeue names them (``JOB`` or
    ``ARRAYJOB_TASK``)."""
    return call(["squeue", "-h", f"--nodelist={nodelist}", "--states=RUNNING",
                 "-o", "%i"]).split()


def sacct_task(where: str) -> Optional[Dict]:
    """What accounting knows of array task ``where`` (``JOB_INDEX``): ``JobState`` and
    ``ExitCode``; None when it does not know it or the cluster keeps no accounting."""
    argv = ["sacct", "-n", "-P", "-X", "-j", where, "-o", "JobID,State,ExitCode"]
    result = run(argv, UNREACHABLE)
    if result.returncode != 0 and NO_ACCOUNTING in result.stderr:
        return None
    for line in printed(result, UNREACHABLE).splitlines():
        job, state, exit_code = (line.split("|") + ["", ""])[:3]
        if job == where and state:
            return {"JobState": state.split()[0], "ExitCode": exit_code}
    return None
