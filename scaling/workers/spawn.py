"""Start this node's worker processes and supervise them, as torchrun does for PyTorch.

    python -m scaling.workers.spawn --processes N --workers H:P,... [--first-rank R]
                                    [--tf-config] -- COMMAND...
    python -m scaling.workers.spawn --processes N --horovod --hosts H,... --node-rank K
                                    --rendezvous H:P [--first-rank R] [--timeline F] -- COMMAND...

``--workers`` lists every rank of every node (``host:port``, in rank order); this node runs
ranks R to R+N-1. Each process gets RANK, LOCAL_RANK and WORLD_SIZE, and with ``--tf-config`` a
TF_CONFIG naming every worker.

``--horovod`` starts Horovod ranks without horovodrun, as its gloo launcher would: each process
gets Horovod's rank, size and gloo rendezvous variables, and node 0's spawner serves the
rendezvous (Horovod's HTTP rendezvous server, with every node's slots) at ``--rendezvous``.

If one process exits with an error, the others get SIGTERM, then SIGKILL after a grace period;
the spawner exits with the first failing code. SIGTERM to the spawner is passed on to every
worker. Standard library only, apart from Horovod's own rendezvous server.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Dict, List

GRACE_S = 10.0


def stop(children: List[subprocess.Popen]) -> None:
    for child in children:
        if child.poll() is None:
            child.terminate()
    deadline = time.monotonic() + GRACE_S
    for child in children:
        try:
            child.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def serve_horovod_rendezvous(rendezvous: str, hosts: List[str], processes: int) -> None:
    """Node 0: Horovod's gloo rendezvous server, in a thread, for every node's slots."""
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
    from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer

    host, port = rendezvous.rsplit(":", 1)
    server = RendezvousHTTPServer((host, int(port)), RendezvousHandler, False)
    slots = ",".join(f"{name}:{processes}" for name in hosts)
    server.init(get_host_assignments(parse_hosts(slots), len(hosts) * processes))
    threading.Thread(target=server.serve_forever, daemon=True).start()


def interface_of(host: str) -> str:
    """The network interface whose network holds ``host``'s address, for gloo to bind to
    (``lo`` for every 127.x address, as for several nodes on one machine)."""
    import psutil

    address = ipaddress.ip_address(socket.gethostbyname(host))
    for name, entries in psutil.net_if_addrs().items():
        for entry in entries:
            if entry.family == socket.AF_INET and entry.netmask and address in \
                    ipaddress.ip_network(f"{entry.address}/{entry.netmask}", strict=False):
                return name
    raise SystemExit(f"no network interface of this machine reaches {host} ({address})")


def horovod_node_env(args, hosts: List[str]) -> Dict[str, str]:
    """What horovodrun's gloo launcher gives every rank of this node (each rank adds its own
    HOROVOD_RANK and HOROVOD_LOCAL_RANK)."""
    host, port = args.rendezvous.rsplit(":", 1)
    env = {
        "HOROVOD_HOSTNAME": hosts[args.node_rank],
        "HOROVOD_SIZE": str(len(hosts) * args.processes), "HOROVOD_LOCAL_SIZE": str(args.processes),
        "HOROVOD_CROSS_RANK": str(args.node_rank), "HOROVOD_CROSS_SIZE": str(len(hosts)),
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": host, "HOROVOD_GLOO_RENDEZVOUS_PORT": port,
        "HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_GLOO_IFACE": interface_of(hosts[args.node_rank]),
    }
    if args.timeline:
        env["HOROVOD_TIMELINE"] = args.timeline
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--processes", type=int, required=True)
    parser.add_argument("--workers", help="host:port of every rank, comma-separated")
    parser.add_argument("--first-rank", type=int, default=0)
    parser.add_argument("--tf-config", action="store_true")
    parser.add_argument("--horovod", action="store_true")
    parser.add_argument("--hosts", help="every node's address, comma-separated (--horovod)")
    parser.add_argument("--node-rank", type=int, default=0)
    parser.add_argument("--rendezvous", help="host:port of node 0's rendezvous (--horovod)")
    parser.add_argument("--timeline", help="Horovod's timeline file (--horovod)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.horovod:
        hosts = args.hosts.split(",")
        if args.node_rank == 0:
            serve_horovod_rendezvous(args.rendezvous, hosts, args.processes)
        node_env, prefix = horovod_node_env(args, hosts), "HOROVOD_"
    else:
        workers = args.workers.split(",")
        node_env, prefix = {"WORLD_SIZE": str(len(workers))}, ""
    children = []
    for local_rank in range(args.processes):
        rank = args.first_rank + local_rank
        env = {**os.environ, **node_env, f"{prefix}RANK": str(rank),
               f"{prefix}LOCAL_RANK": str(local_rank)}
        if args.tf_config:
            env["TF_CONFIG"] = json.dumps({"cluster": {"worker": workers},
                                           "task": {"type": "worker", "index": rank}})
        children.append(subprocess.Popen(command, env=env))

    def on_sigterm(signum, frame):
        stop(children)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_sigterm)
    while True:
        codes = [child.poll() for child in children]
        failed = [code for code in codes if code not in (None, 0)]
        if failed:
            stop(children)
            sys.exit(failed[0] if failed[0] > 0 else 128 - failed[0])
        if all(code == 0 for code in codes):
            sys.exit(0)
        time.sleep(0.1)


if __name__ == "__main__":
    main()
