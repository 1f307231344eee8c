"""`make quickstart` as a new user runs it: a fresh clone of this checkout's commit and empty
caches (packages, the harness's own under ``XDG_CACHE_HOME``), timed from outside: when the
install ended, when the sweep's command started (after ``scaling devices``), when the first
cell was recorded ``ok``, and when the command ended; with the share of the cells' wall time
inside their windows, as the summary prints it, and the share of the sweep command's whole wall
time (its start to the end, the report included).

    python bench/fresh_quickstart.py --output bench/results/fresh_quickstart.json
"""

import argparse
import json
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

from benchlib import machine

ROOT = Path(__file__).resolve().parents[1]


def run(scratch: Path) -> dict:
    clone, cache = scratch / "clone", scratch / "cache"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    env = {key: value for key, value in os.environ.items()
           if key not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    env.update(XDG_CACHE_HOME=str(cache), PIP_CACHE_DIR=str(cache / "pip"),
               UV_CACHE_DIR=str(cache / "uv"))
    results = clone / "runs" / "quickstart" / "results.jsonl"
    marks = {}
    started = time.time()
    with open(scratch / "make.log", "w") as log:
        make = subprocess.Popen(["make", "quickstart"], cwd=clone, env=env, stdout=log,
                                stderr=subprocess.STDOUT)
        while make.poll() is None:
            if "installed_s" not in marks and (clone / ".venv" / ".quickstart").exists():
                marks["installed_s"] = time.time() - started
            if "sweep_started_s" not in marks and "scaling sweep" in \
                    (scratch / "make.log").read_text():
                marks["sweep_started_s"] = time.time() - started
            if "first_ok_s" not in marks and results.exists() and any(
                    json.loads(line)["status"] == "ok"
                    for line in results.read_text().splitlines()):
                marks["first_ok_s"] = time.time() - started
            time.sleep(0.5)
    marks.update(total_s=time.time() - started, returncode=make.returncode)
    output = (scratch / "make.log").read_text()
    share = re.search(r"Windows: (\d+) s of the cells' (\d+) s of wall time \((\d+)%\)", output)
    if share and "sweep_started_s" in marks:
        marks.update(windows_s=int(share[1]), cells_wall_s=int(share[2]),
                     window_share=int(share[3]) / 100,
                     sweep_s=round(marks["total_s"] - marks["sweep_started_s"], 1),
                     window_share_of_sweep=round(
                         int(share[1]) / (marks["total_s"] - marks["sweep_started_s"]), 3))
    marks["table"] = [line for line in output.splitlines() if "img/s" not in line and "│" in line
                      and ("single" in line or "torchrun" in line)]
    return marks


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        marks = run(Path(scratch))
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.strip()
    result = {"benchmark": "make quickstart from a fresh clone with empty caches",
              "commit": commit, "machine": machine(), **marks}
    print(json.dumps(result, indent=2))
    if args.output:
        args.output.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
