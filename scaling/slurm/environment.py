"""The Slurm job a process runs in, read from its environment in one place (in the spirit of
submitit's ``JobEnvironment``), and the controller's answers about its nodes: their names and
addresses, and the rendezvous port every node of a step derives alike."""

from __future__ import annotations

import os
import re
import zlib
from dataclasses import dataclass
from typing import List, Mapping, Optional

from scaling.slurm import controller


@dataclass(frozen=True)
class JobEnvironment:
    """What Slurm tells a process of its job, array task, step and node."""

    job_id: str
    """The array's job id for an array task (``SLURM_ARRAY_JOB_ID``), else the job's own."""
    array_task_id: Optional[str]
    step_id: Optional[str]
    job_nodelist: Optional[str]
    step_nodelist: Optional[str]
    """The nodes of this ``srun`` step: all of the job's for an array task, a subset for a step
    of a whole-sweep allocation."""
    node_rank: int
    """This node's rank in the step (``SLURM_NODEID``)."""
    node_name: Optional[str]
    restart_count: int
    cluster_name: str
    """``SLURM_CLUSTER_NAME``: clusters that share hosts number their jobs alike."""

    @classmethod
    def read(cls, env: Mapping[str, str] = os.environ) -> "JobEnvironment":
        return cls(job_id=env.get("SLURM_ARRAY_JOB_ID") or env.get("SLURM_JOB_ID", ""),
                   array_task_id=env.get("SLURM_ARRAY_TASK_ID"),
                   step_id=env.get("SLURM_STEP_ID"),
                   job_nodelist=env.get("SLURM_JOB_NODELIST"),
                   step_nodelist=env.get("SLURM_STEP_NODELIST", env.get("SLURM_JOB_NODELIST")),
                   node_rank=int(env.get("SLURM_NODEID", "0")),
                   node_name=env.get("SLURMD_NODENAME"),
                   restart_count=int(env.get("SLURM_RESTART_COUNT", "0")),
                   cluster_name=env.get("SLURM_CLUSTER_NAME", ""))

    def rendezvous_port(self, task_id: str) -> int:
        """A port in 20000-49999 that every node of task ``task_id`` of this job derives alike;
        the cluster's name tells apart the same job and task of two clusters whose nodes share
        hosts."""
        cluster = zlib.crc32(self.cluster_name.encode())
        return 20000 + (int(self.job_id) * 131 + int(task_id) * 17 + cluster) % 30000

    @property
    def own_job(self) -> str:
        """This job as ``squeue`` names it: ``JOB_TASK`` for an array task."""
        return f"{self.job_id}_{self.array_task_id}" if self.array_task_id else self.job_id


_ADDR = re.compile(r"\bNodeName=(\S+).*?\bNodeAddr=(\S+)")


def hostnames(nodelist: str) -> List[str]:
    """The node names of ``nodelist`` (Slurm's compressed form), in its order."""
    return controller.call(["scontrol", "show", "hostnames", nodelist]).split()


def node_addresses(nodelist: str) -> List[str]:
    """The address of each node of ``nodelist``, in its order."""
    names = hostnames(nodelist)
    out = controller.call(["scontrol", "show", "node", "-o", ",".join(names)])
    addresses = dict(_ADDR.findall(out))
    return [addresses.get(name, name) for name in names]
