"""Where a cell's ranks run: its hosts, ranks per host, this node's rank and the rendezvous.

A launcher turns (cell, placement) into the argv and environment of this node's processes. The
local case builds a placement from this machine; a scheduler builds one from its allocation.
Throughput never compares the clocks of different hosts: every rank times its own window between
two barriers, and the harness divides the global image count by the longest window.
"""

from __future__ import annotations

import random
import re
import socket
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from scaling.errors import InfrastructureError, ScalingError

LOCALHOST = "127.0.0.1"
_ENDPOINT = re.compile(r"(?P<host>[A-Za-z0-9_.\-]+|\[[0-9A-Fa-f:]+\]):(?P<port>[0-9]{1,5})")


@dataclass(frozen=True)
class Placement:
    nodes: int
    hosts: Tuple[str, ...]
    """One address per node, in node-rank order; empty where the command line did not name them
    (a launcher with a rendezvous service, such as torchrun, does not need them)."""
    ranks_per_host: int
    """Processes the launcher starts on each node."""
    node_rank: int
    """This node's index in ``hosts``."""
    rendezvous_host: str
    rendezvous_port: int
    """Where the ranks meet; consecutive ports from here serve launchers that need one per rank."""

    @property
    def rendezvous(self) -> str:
        return f"{self.rendezvous_host}:{self.rendezvous_port}"

    @property
    def first_rank(self) -> int:
        """Global rank of this node's first process."""
        return self.node_rank * self.ranks_per_host

    def rank_endpoints(self) -> List[str]:
        """``host:port`` of every rank on every node, in global rank order. Each rank has its
        own port, rendezvous port + global rank, so that ranks that listen on every address
        never collide, even when several nodes share one machine."""
        if len(self.hosts) != self.nodes:
            raise ScalingError(f"this launcher addresses every rank: name the {self.nodes} "
                               "nodes' hosts (--hosts)")
        return [f"{host}:{self.rendezvous_port + node * self.ranks_per_host + index}"
                for node, host in enumerate(self.hosts) for index in range(self.ranks_per_host)]


def parse_endpoint(text: str, what: str = "--rendezvous") -> Tuple[str, int]:
    """``"node0:29500"`` -> ("node0", 29500); a one-line error for anything else."""
    match = _ENDPOINT.fullmatch(text.strip()) if isinstance(text, str) else None
    if not match or not 0 < int(match.group("port")) < 65536:
        raise ScalingError(f"{what} takes host:port with a port from 1 to 65535, got {text!r}")
    return match.group("host"), int(match.group("port"))


def free_port_block(count: int, host: str = LOCALHOST, tries: int = 50) -> int:
    """The first of ``count`` consecutive ports that are free on ``host`` right now."""
    for _ in range(tries):
        base = random.randint(20000, 60000 - count)
        sockets = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind((host, port))
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise InfrastructureError(f"found no {count} free consecutive ports on {host}")


def local_placement(ranks_per_host: int, nodes: int = 1, node_rank: int = 0,
                    rendezvous: Optional[str] = None,
                    hosts: Optional[Sequence[str]] = None) -> Placement:
    """A placement from this machine and the command line.

    One node: every rank on this machine, meeting on free loopback ports. Several nodes: the same
    command runs on each node with its ``node_rank``; the rendezvous is required, and ``hosts``
    is needed by launchers that address every rank (tf-multiworker).
    """
    if nodes == 1 and rendezvous is None:
        return Placement(1, (LOCALHOST,), ranks_per_host, 0, LOCALHOST,
                         free_port_block(ranks_per_host))
    if rendezvous is None:
        raise ScalingError("a run over several nodes needs a rendezvous endpoint (host:port), "
                           "the same on each node's command, or a scheduler: --backend slurm")
    host, port = parse_endpoint(rendezvous)
    if not 0 <= node_rank < nodes:
        raise ScalingError(f"--node-rank must be from 0 to {nodes - 1}, got {node_rank}")
    if hosts and len(hosts) != nodes:
        raise ScalingError(f"--hosts names {len(hosts)} hosts for {nodes} nodes")
    return Placement(nodes, tuple(hosts or ()), ranks_per_host, node_rank, host, port)
