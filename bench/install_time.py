"""How long the quickstart's install takes on a fresh machine: a new virtual environment and an
empty package cache, the harness with PyTorch and plotting (``make quickstart``'s extras) under
``constraints.txt``, by pip (``--no-compile``) and by uv (installed into the venv by its pip
first, as the Makefile does). The two alternate, ``--runs`` times each.

    python bench/install_time.py --runs 2 --output bench/results/install_time.json
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import alternating, machine

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = "torch,plot"


def install(side: str, scratch: Path) -> float:
    """Seconds from an empty venv and cache to the harness importable with torch."""
    venv, cache = scratch / "venv", scratch / "cache"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    env = {**os.environ, "PIP_CACHE_DIR": str(cache), "UV_CACHE_DIR": str(cache)}
    target = ["-c", "constraints.txt", "-e", f".[{EXTRAS}]"]
    commands = {
        "pip": [[python, "-m", "pip", "install", "--quiet", "--no-compile", *target]],
        "uv": [[python, "-m", "pip", "install", "--quiet", "-c", "constraints.txt", "uv"],
               [str(venv / "bin" / "uv"), "pip", "install", "--quiet", "--system-certs",
                "--python", python, *target]],
    }[side]
    started = time.perf_counter()
    for command in commands:
        subprocess.run(command, check=True, cwd=ROOT, env=env)
    seconds = time.perf_counter() - started
    subprocess.run([python, "-c", "import scaling, torch"], check=True, cwd=scratch)
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()

    def measure(side: str, repeat: int) -> float:
        with tempfile.TemporaryDirectory() as scratch:
            seconds = install(side, Path(scratch))
        print(f"{side} run {repeat}: {seconds:.1f} s", flush=True)
        return seconds

    figures = alternating(args.runs, ("pip", "uv"), measure, label="install")
    result = {"benchmark": "the quickstart's install from an empty cache, pip against uv",
              "extras": EXTRAS, "runs": args.runs, "machine": machine(), "seconds": figures,
              "median_s": {side: statistics.median(values) for side, values in figures.items()}}
    print(json.dumps(result["median_s"]))
    if args.output:
        args.output.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
