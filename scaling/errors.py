"""Errors that the command line reports as one line, without a traceback."""


class ScalingError(Exception):
    """Bad input or an environment that cannot run what was asked."""
