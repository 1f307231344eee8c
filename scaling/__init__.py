"""scaling: measure how deep-learning training throughput grows with the number of devices."""

__version__ = "0.1.0"
