"""Start this node's worker processes and supervise them, as torchrun does for PyTorch.

    python -m scaling.workers.spawn --processes N --workers H:P,... [--first-rank R]
                                    [--tf-config] -- COMMAND...

``--workers`` lists every rank of every node (``host:port``, in rank order); this node runs
ranks R to R+N-1. Each process gets RANK, LOCAL_RANK and WORLD_SIZE, and with ``--tf-config`` a
TF_CONFIG naming every worker. If one exits with an error, the others get SIGTERM, then
SIGKILL after a grace period; the spawner exits with the first failing code. SIGTERM to the
spawner is passed on to every worker. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from typing import List

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--processes", type=int, required=True)
    parser.add_argument("--workers", required=True, help="host:port of every rank, comma-separated")
    parser.add_argument("--first-rank", type=int, default=0)
    parser.add_argument("--tf-config", action="store_true")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    workers = args.workers.split(",")
    children = []
    for local_rank in range(args.processes):
        rank = args.first_rank + local_rank
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(local_rank),
               "WORLD_SIZE": str(len(workers))}
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
