"""Parsing and printing byte sizes such as ``3GiB``."""

from __future__ import annotations

import re

from scaling.errors import ScalingError

_UNITS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
    "ki": 2**10, "kib": 2**10, "mi": 2**20, "mib": 2**20, "gi": 2**30, "gib": 2**30,
    "ti": 2**40, "tib": 2**40, "t": 10**12, "tb": 10**12,
}


def parse_bytes(text) -> int:
    """``"3GiB"`` -> 3221225472; plain integers are bytes."""
    if isinstance(text, int):
        value = text
    else:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(text))
        if not match or match.group(2).lower() not in _UNITS:
            raise ScalingError(
                f"bad memory size {text!r}; write a number with a unit, such as 3GiB or 512MiB"
            )
        value = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if value <= 0:
        raise ScalingError(f"memory size must be positive, got {text!r}")
    return value


def format_bytes(value) -> str:
    if value is None:
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            return f"{value / size:.2f} {unit}"
    return f"{value} B"


_DURATION = re.compile(r"(?:([0-9]*\.?[0-9]+)h)?(?:([0-9]*\.?[0-9]+)m)?(?:([0-9]*\.?[0-9]+)s?)?")


def parse_duration(text) -> float:
    """``"30m"`` -> 1800.0; ``"1h30m"``, ``"90s"`` and plain seconds (``"600"``) as well."""
    match = _DURATION.fullmatch(str(text).strip().lower())
    if not str(text).strip() or not match or not any(match.groups()):
        raise ScalingError(f"bad duration {text!r}; write it as 90s, 10m, 1h30m or seconds")
    hours, minutes, seconds = (float(part or 0) for part in match.groups())
    value = hours * 3600 + minutes * 60 + seconds
    if value <= 0:
        raise ScalingError(f"a duration must be positive, got {text!r}")
    return value
