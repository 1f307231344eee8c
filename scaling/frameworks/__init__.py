"""Frameworks by name (``scaling.frameworks.base``), with every framework the harness ships
registered: one module each."""

from scaling.frameworks import jax, mxnet, pytorch, tensorflow  # noqa: F401  (registration)
from scaling.frameworks.base import (FRAMEWORKS, Framework, framework_names, get_framework,
                                     missing_framework, probe, register_framework)

__all__ = ["FRAMEWORKS", "Framework", "framework_names", "get_framework", "missing_framework",
           "probe", "register_framework"]
