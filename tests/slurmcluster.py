"""A private Slurm cluster on this one machine: munged, slurmctld and one slurmd per node, each
node on its own loopback address and port, everything in one temporary folder, stopped by the
pids in its pid files."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Dict, List

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel")


def missing_binaries() -> List[str]:
    return [name for name in DAEMONS
            if shutil.which(name) is None and not Path(f"/usr/sbin/{name}").exists()]


def _binary(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class SlurmCluster:
    """``with SlurmCluster(tmp, nodes=2) as cluster:`` runs jobs with ``cluster.env``."""

    def __init__(self, root: Path, nodes: int = 2, cpus_per_node: int = 2):
        self.root, self.nodes, self.cpus = Path(root), nodes, cpus_per_node
        self.conf = self.root / "slurm.conf"
        self.env: Dict[str, str] = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.pid_files: List[Path] = []

    def node_names(self) -> List[str]:
        return [f"n{index + 1}" for index in range(self.nodes)]

    def _write_config(self) -> None:
        root = self.root
        (root / "state").mkdir(parents=True, exist_ok=True)
        lines = [
            "ClusterName=scalingtest", "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={_free_port()}", "AuthType=auth/munge", "CredType=cred/munge",
            f"AuthInfo=socket={root / 'munge.socket'}", "SlurmUser=root", "SlurmdUser=root",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "MpiDefault=none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "ReturnToService=2",
            "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none",
            "JobAcctGatherType=jobacct_gather/none", "MinJobAge=86400", "KillWait=5",
            "InactiveLimit=0", "SchedulerParameters=defer_batch",
            f"StateSaveLocation={root / 'state'}", f"SlurmdSpoolDir={root / 'spool-%n'}",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={root / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'slurmd-%n.log'}",
        ]
        for index, name in enumerate(self.node_names()):
            lines.append(f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.{11 + index} "
                         f"Port={_free_port()} CPUs={self.cpus} State=UNKNOWN")
        lines.append("PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")

    def _start_munge(self) -> None:
        key = self.root / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o600)
        pid = self.root / "munged.pid"
        subprocess.run([_binary("munged"), f"--key-file={key}",
                        f"--socket={self.root / 'munge.socket'}", f"--pid-file={pid}",
                        f"--log-file={self.root / 'munged.log'}",
                        f"--seed-file={self.root / 'munge.seed'}", "--force"], check=True)
        self.pid_files.append(pid)

    def __enter__(self) -> "SlurmCluster":
        self.root.mkdir(parents=True, exist_ok=True)
        self._write_config()
        self._start_munge()
        subprocess.run([_binary("slurmctld"), "-f", str(self.conf), "-i"], check=True,
                       env=self.env)
        self.pid_files.append(self.root / "slurmctld.pid")
        for name in self.node_names():
            subprocess.run([_binary("slurmd"), "-f", str(self.conf), "-N", name], check=True,
                           env=self.env)
            self.pid_files.append(self.root / f"slurmd-{name}.pid")
        self._wait_until_idle()
        return self

    def _wait_until_idle(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            out = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True,
                                 env=self.env).stdout.split()
            if len(out) >= 1 and all(state == "idle" for state in out):
                return
            time.sleep(0.5)
        raise RuntimeError(f"Slurm nodes not idle after {timeout_s} s: see {self.root}")

    def __exit__(self, *exc) -> None:
        for pid_file in reversed(self.pid_files):
            try:
                os.kill(int(pid_file.read_text().split()[0]), signal.SIGTERM)
            except (OSError, ValueError):
                continue
        time.sleep(1)

    def wait_for_jobs(self, timeout_s: float = 600) -> None:
        """Until the queue is empty."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not subprocess.run(["squeue", "-h"], capture_output=True, text=True,
                                  env=self.env).stdout.strip():
                return
            time.sleep(1)
        raise RuntimeError("jobs still queued")
