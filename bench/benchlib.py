"""What the benchmark scripts share: the machine they ran on, and one harness cell."""

import platform
from pathlib import Path

from scaling import hardware
from scaling.cell import make_cell
from scaling.execute.run import run_cell


def machine() -> dict:
    return {"cpu_model": hardware.cpu_model(), "cores": hardware.cpu_cores(),
            "python": platform.python_version()}


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
