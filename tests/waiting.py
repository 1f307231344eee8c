"""The tests' one wait on a condition."""

from __future__ import annotations

import time


def wait_until(condition, what: str, timeout: float = 300.0):
    """Poll ``condition`` until it returns something true, and return that; raise, saying
    ``what`` was awaited, after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout:g} s")
        time.sleep(0.2)
