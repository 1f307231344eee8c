"""scaling: measure how deep-learning training throughput grows with the number of devices."""

from pathlib import Path

__version__ = "0.1.0"

PROJECT_ROOT = Path(__file__).resolve().parents[1]
"""The folder that holds the ``scaling`` and ``workloads`` packages (the checkout, or
site-packages): workers run with it on their ``PYTHONPATH``."""
