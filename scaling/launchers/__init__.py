"""Launchers by name (``scaling.launchers.base``), with every launcher the harness ships
registered: one module each."""

from scaling.launchers import (horovod, jax, mxnet, single,  # noqa: F401  (registration)
                               tensorflow, torchrun)
from scaling.launchers.base import (LAUNCHERS, Launcher, Number, OneProcessPerNode,
                                    SpawnedPerDevice, check_options, default_python,
                                    get_launcher, launchers_of, register_launcher, thread_env,
                                    valid_options, worker_argv)

__all__ = ["LAUNCHERS", "Launcher", "Number", "OneProcessPerNode", "SpawnedPerDevice",
           "check_options", "default_python", "get_launcher", "launchers_of",
           "register_launcher", "thread_env", "valid_options", "worker_argv"]
