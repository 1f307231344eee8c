"""A real Ray cluster of several nodes on this one machine, for the Ray backend's tests: Ray's
own ``ray.cluster_utils.Cluster`` starts a head (its GCS) and one raylet per node, each node
with its own CPUs and its own node id, as on a cluster of several hosts."""

from __future__ import annotations

import os
from typing import Dict


def missing_ray() -> str:
    """Why Ray cannot run here, or '' where it can."""
    try:
        import ray.cluster_utils  # noqa: F401
    except ImportError as error:
        return f"Ray is not installed ({error}; make test installs it)"
    return ""


class RayCluster:
    """``with RayCluster(nodes=2) as cluster:``, its head at ``cluster.address`` and an
    environment (``cluster.env``) whose ``scaling`` commands reach it."""

    def __init__(self, nodes: int = 2, cpus_per_node: int = 2):
        self.nodes, self.cpus_per_node = nodes, cpus_per_node

    def __enter__(self) -> "RayCluster":
        from ray.cluster_utils import Cluster

        self.cluster = Cluster(initialize_head=True, connect=False, head_node_args={
            "num_cpus": self.cpus_per_node, "include_dashboard": False})
        for _ in range(self.nodes - 1):
            self.cluster.add_node(num_cpus=self.cpus_per_node)
        self.cluster.wait_for_nodes()
        self.address = self.cluster.address
        self.env: Dict[str, str] = {**os.environ, "RAY_ADDRESS": self.address}
        return self

    def node_ids(self) -> set:
        return {node.node_id for node in self.cluster.list_all_nodes()}

    def __exit__(self, *exc) -> None:
        self.cluster.shutdown()
