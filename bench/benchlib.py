"""What the benchmark scripts share: the machine they ran on, and one harness cell."""

import platform
from pathlib import Path

from scaling import hardware
from scaling.cell import make_cell
from scaling.execute.run import run_cell


def machine() -> dict:
    return {"cpu_model": hardware.cpu_model(), "cores": hardware.cpu_cores(),
            "python": platform.python_version()}


def alternating(runs: int, sides, measure, label: str = "") -> dict:
    """``measure(side, repeat)`` for each side, ``runs`` times, the order of the sides reversed
    in every other run so that drift in the machine's load hits both alike; each side's
    figures in run order."""
    figures = {side: [] for side in sides}
    for repeat in range(runs):
        for side in (sides if repeat % 2 == 0 else sides[::-1]):
            figures[side].append(measure(side, repeat))
        print(f"{label} run {repeat}: " + ", ".join(
            f"{'/'.join(map(str, side)) if isinstance(side, tuple) else side} {values[-1]:.2f}"
            for side, values in figures.items()), flush=True)
    return figures


def harness_record(scratch: Path, **fields) -> dict:
    """Run one CPU cell through the harness; stop the benchmark if it is not ok."""
    watch = fields.pop("watch", None)
    python = fields.pop("python", None)
    cell = make_cell(device_type="cpu", **fields)
    record = run_cell(cell, scratch, python=python, **({"watch": watch} if watch else {}))
    if record["status"] != "ok":
        raise SystemExit(f"{cell.framework} {cell.workload}: {record['status']}: "
                         f"{record['error']}")
    return record
