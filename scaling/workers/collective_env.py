"""The environment that tunes the collectives and the launchers: captured when a cell is made,
part of its identity and its record, and given to its workers exactly.

A variable is captured when its name starts with one of :data:`PREFIXES`, unless it only sets
logging (:data:`LOGGING`) or the harness sets it for the workers itself (:data:`HARNESS_SET`).
TensorFlow's names share ``TF_`` with other tools (Terraform's ``TF_VAR_*``, ``TF_CLI_*``), so
only its tuning families are listed. Standard library only: workers report what they saw.
"""

from __future__ import annotations

from typing import Dict, Mapping

PREFIXES = (
    "NCCL_", "TORCH_NCCL_", "GLOO_", "HOROVOD_", "MXNET_", "XLA_FLAGS", "FI_", "UCX_",
    "TF_ENABLE_", "TF_NUM_", "TF_GPU_", "TF_FORCE_GPU_", "TF_XLA_", "TF_CUDNN_", "TF_ONEDNN_",
    "TF_DETERMINISTIC_", "TF_CPU_", "TF_USE_LEGACY_KERAS",
)
"""NCCL (and torch's NCCL process group), gloo, Horovod, MXNet, XLA, the network transports
under NCCL (libfabric, UCX), and TensorFlow's threads, devices, allocators, XLA and kernels."""

LOGGING = ("NCCL_DEBUG", "HOROVOD_LOG_", "TF_CPP_")
"""Names under those prefixes that only set what is logged."""

HARNESS_SET = frozenset({
    "HOROVOD_RANK", "HOROVOD_LOCAL_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_SIZE",
    "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE", "HOROVOD_HOSTNAME", "HOROVOD_CONTROLLER",
    "HOROVOD_CPU_OPERATIONS", "HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_GLOO_RENDEZVOUS_PORT",
    "HOROVOD_GLOO_IFACE", "HOROVOD_TIMELINE", "TF_CONFIG", "TF_CPU_ALLOCATOR_USE_BFC",
    "TF_CPU_BFC_MEM_LIMIT_IN_MB", "MXNET_CPU_WORKER_NTHREADS", "MXNET_ENGINE_TYPE",
})
"""Names that the launchers (horovodrun, the harness's spawner) or the workers set for each
rank: its place in the cell, the rendezvous, the timeline option, TensorFlow's memory cap, and
the frameworks' own settings (``env`` in ``scaling.frameworks``)."""


def tunable(name: str) -> bool:
    """Whether ``name`` tunes the collectives or launchers and is the user's to set."""
    return name.startswith(PREFIXES) and not name.startswith(LOGGING) and name not in HARNESS_SET


def capture(environ: Mapping[str, str]) -> Dict[str, str]:
    """The tunable variables of ``environ``, sorted by name."""
    return {name: environ[name] for name in sorted(environ) if tunable(name)}


def exactly(env: Mapping[str, str], collective_env: Mapping[str, str]) -> Dict[str, str]:
    """``env`` with its tunable variables replaced by ``collective_env``: a node whose own
    environment differs runs the cell as it was made."""
    return {**{name: value for name, value in env.items() if not tunable(name)},
            **collective_env}
