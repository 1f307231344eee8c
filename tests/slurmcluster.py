"""A private Slurm cluster on this one machine: munged, slurmctld and one slurmd per node, each
node on its own loopback address and port, everything in one temporary folder, stopped by the
pids in its pid files."""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import shutil
import signal
import socket
import subprocess
from pathlib import Path
from typing import Dict, List

import psutil
from cpugroup import cpu_group
from waiting import wait_until

_NUMBERS = itertools.count()
"""Each cluster of this pytest process is named apart from the others', and from every other
process's, as they share node addresses and number their jobs alike from 1."""

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
            f"ClusterName=scaling{os.getpid()}c{next(_NUMBERS)}",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={_free_port()}", "AuthType=auth/munge", "CredType=cred/munge",
            f"AuthInfo=socket={root / 'munge.socket'}", "SlurmUser=root", "SlurmdUser=root",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "MpiDefault=none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "ReturnToService=2",
            "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none",
            "JobAcctGatherType=jobacct_gather/none", "MinJobAge=86400", "KillWait=5",
            "InactiveLimit=0", "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0",
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
        try:
            self.start_controller()
            self.pid_files.append(self.root / "slurmctld.pid")
            for name in self.node_names():
                subprocess.run([_binary("slurmd"), "-f", str(self.conf), "-N", name],
                               check=True, env=self.env)
                self.pid_files.append(self.root / f"slurmd-{name}.pid")
            wait_until(self._idle, "idle Slurm nodes", timeout=60)
        except BaseException:
            self._stop_daemons()
            raise
        return self

    def _idle(self) -> bool:
        out = self.run("sinfo", "-h", "-o", "%t").stdout.split()
        return bool(out) and all(state == "idle" for state in out)

    def run(self, *argv: str) -> subprocess.CompletedProcess:
        """A Slurm command against this cluster."""
        return subprocess.run(argv, capture_output=True, text=True, env=self.env)

    def start_controller(self, clear_state: bool = False) -> None:
        """Start ``slurmctld`` and wait until it answers. It takes its jobs back from
        ``StateSaveLocation``, unless ``clear_state``: then it has forgotten every job."""
        subprocess.run([_binary("slurmctld"), "-f", str(self.conf), "-i",
                        *(["-c"] if clear_state else [])], check=True, env=self.env)
        wait_until(lambda: self.run("scontrol", "ping").returncode == 0, "slurmctld answering",
                   timeout=60)

    def stop_controller(self) -> None:
        """Stop ``slurmctld`` by the pid in its pid file (it saves its state first) and wait
        until it is gone; the nodes and their jobs go on."""
        pid = int((self.root / "slurmctld.pid").read_text().split()[0])
        os.kill(pid, signal.SIGTERM)
        wait_until(lambda: not _alive(pid), f"slurmctld (pid {pid}) gone", timeout=60)

    def __exit__(self, *exc) -> None:
        """Cancel what is still queued and let it end, then stop every daemon by its pid."""
        try:
            if not (self.root / "slurmctld.pid").exists():
                self.start_controller()
            self.run("scancel", "--full", "--user", str(os.getuid()))
            wait_until(lambda: not self.run("squeue", "-h").stdout.strip(), "an empty queue",
                       timeout=120)
        finally:
            self._stop_daemons()

    def slowed(self, name: str, share: float):
        """Node ``name`` really slowed while inside: its ``slurmd``, and so every process it
        starts from now on, under a CPU quota of ``share`` of one core (each 10 ms period).
        Skips the test where cgroups cannot be written."""
        return self.grouped(name, "slowed", cfs_period_us=10000,
                            cfs_quota_us=int(share * 10000))

    @contextlib.contextmanager
    def grouped(self, name: str, why: str, **settings):
        """Node ``name``'s ``slurmd``, and every process it starts from now on, in a CPU group
        of its own with ``settings`` (tests/cpugroup.py) while inside; named for this pytest
        process too, as every pytest process's first cluster folder has the same name."""
        group_name = f"scaling-{os.getpid()}-{self.root.name}-{name}-{why}"
        with cpu_group(group_name, **settings) as group:
            pid = (self.root / f"slurmd-{name}.pid").read_text().split()[0]
            (group / "cgroup.procs").write_text(pid)
            yield

    def _stop_daemons(self) -> None:
        pids = []
        for pid_file in reversed(self.pid_files):
            try:
                pids.append(int(pid_file.read_text().split()[0]))
                os.kill(pids[-1], signal.SIGTERM)
            except (OSError, ValueError):
                continue
        wait_until(lambda: not any(map(_alive, pids)), "the daemons gone", timeout=30)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
