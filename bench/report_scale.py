"""Does reporting scale with the run? ``scaling report``, ``compare``, ``export`` and
``history`` (adding the run to a history, then its trends) on synthetic runs of 10,000 and
100,000 records, timed from outside through the command line.

A synthetic run is a real run's records (the quickstart's 14: ``runs/quickstart``, ``/tmp/qs1``
or another folder given with ``--source``; without one, 14 quickstart-like records from the
tests' ``recorded_cell``) copied over hosts, per-device batch sizes, workload names and repeats
(40 hosts x 7 batches x 5 names x 3 repeats of the 14 records is 58,800 records; the hosts grow
with the size asked for), each copy with its own ``cell`` id and a later ``started_at``, cut to
the size asked for. ``compare`` takes two such runs, the second one's figures moved by up to
16% either way, each point by its own factor, so that it finds changes. Each command runs
``--runs`` times in a fresh process; their medians are quoted.

Each command's wall-clock seconds, and its CPU seconds (user and system, of the command's
process), which hold where other work shares the machine. Targets: ``report``, ``compare``,
``export`` and both history commands each at most 20 s at 100,000 records, and ten times the
records at most twelve times the time.

    python bench/report_scale.py --output bench/results/report_scale.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import machine

ROOT = Path(__file__).resolve().parents[1]
BATCHES = (1, 2, 4, 8, 16, 32, 64)
"""Per-device batch multipliers of a copy (1: the record's own batch)."""
NAMES = 5
REPEATS = 3
SIZES = (10_000, 100_000)
TARGET_S = 20.0
TARGET_GROWTH = 12.0
TARGETED = ("report", "compare", "export", "history add", "history")
"""The commands the targets are for; ``report --html`` (which draws every figure and writes
every row's model line into the page) is timed beside them."""


def source_folder(given) -> Path | None:
    """A real run's folder: ``given``, the quickstart under runs/, /tmp/qs1, or another run
    under runs/ or /tmp/q*; None where there is none."""
    candidates = [Path(given)] if given else [
        ROOT / "runs" / "quickstart", Path("/tmp/qs1"), *sorted((ROOT / "runs").glob("*")),
        *sorted(Path("/tmp").glob("q*"))]
    for folder in candidates:
        store = folder / "results.jsonl"
        if store.is_file() and any(json.loads(line).get("purpose", "sweep") == "sweep"
                                   for line in store.read_text().splitlines() if line.strip()):
            return folder
    return None


def generated_records():
    """14 quickstart-like records (cifar10 and resnet50; single at 1 device x 3, torchrun at
    1 and 2 devices x 2) from the tests' ``recorded_cell``, a minute apart."""
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import recorded_cell

    records, start = [], datetime.datetime(2024, 3, 4, 9, 0, tzinfo=datetime.timezone.utc)
    for workload, ips in (("cifar10", 230.0), ("resnet50", 60.0)):
        for repeat in range(3):
            cells = [recorded_cell(1, ips, workload=workload, launcher="single",
                                   repeat=repeat, batch=16)]
            if repeat < 2:
                cells += [recorded_cell(1, ips * 0.97, workload=workload, repeat=repeat,
                                        batch=16),
                          {**recorded_cell(2, ips * 1.7, workload=workload, repeat=repeat,
                                           batch=16), "allreduce_time_s": 0.01}]
            for cell in cells:
                cell.update(started_at=start.isoformat(), hosts=["vm"], host="vm",
                            images_per_sec_ci95=[cell["images_per_sec"] * 0.98,
                                                 cell["images_per_sec"] * 1.02])
                start += datetime.timedelta(minutes=1)
                records.append(cell)
    return records


def stamp(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text)


def replicated(records, count: int, scale=lambda batch, name: 1.0):
    """The first ``count`` copies of ``records`` over hosts, batch sizes, workload names and
    repeats (hosts outermost), each copy's cells with their own id and start; ``scale(batch,
    name)`` multiplies the images/sec of a copy's cells (the same factor for every copy of a
    point, so that ``compare`` finds it moved)."""
    sweep = [record for record in records if record.get("purpose", "sweep") == "sweep"]
    starts = [stamp(r["started_at"]) for r in sweep if r.get("started_at")]
    span = (max(starts) - min(starts) + datetime.timedelta(minutes=1)) if starts else \
        datetime.timedelta(hours=1)
    first = min(starts) if starts else datetime.datetime(2024, 3, 4,
                                                         tzinfo=datetime.timezone.utc)
    out, copy = [], 0
    while len(out) < count:
        host = copy // (len(BATCHES) * NAMES * REPEATS)
        batch = copy // (NAMES * REPEATS) % len(BATCHES)
        name = copy // REPEATS % NAMES
        repeat = copy % REPEATS
        factor = scale(batch, name)
        for record in sweep:
            moved = dict(record)
            start = stamp(record["started_at"]) if record.get("started_at") else first
            moved.update(
                cell=f"{record['cell']}-{copy:06x}",
                host=f"node{host:03d}", hosts=[f"node{host:03d}"] * len(record.get("hosts")
                                                                       or [None]),
                batch_size=record["batch_size"] * BATCHES[batch],
                global_batch_size=record["batch_size"] * BATCHES[batch]
                * record["total_devices"],
                workload=record["workload"] + (f"-{name}" if name else ""),
                repeat=record.get("repeat", 0) + REPEATS * repeat,
                started_at=(start + copy * span).isoformat())
            if moved.get("images_per_sec") is not None and factor != 1.0:
                moved["images_per_sec"] *= factor
                if moved.get("images_per_sec_ci95"):
                    moved["images_per_sec_ci95"] = [end * factor
                                                    for end in moved["images_per_sec_ci95"]]
            out.append(moved)
            if len(out) == count:
                break
        copy += 1
    return out


def write_run(folder: Path, records, source: Path | None) -> Path:
    folder.mkdir(parents=True)
    with open(folder / "results.jsonl", "w") as out:
        for record in records:
            out.write(json.dumps(record, sort_keys=True) + "\n")
    if source is not None and (source / "fingerprints").is_dir():
        shutil.copytree(source / "fingerprints", folder / "fingerprints")
    return folder


def timed(args, ok=(0,)):
    """(wall-clock seconds, CPU seconds (user and system), stdout) of ``scaling ARGS`` in a
    fresh process; stops on a failure. The CPU seconds are what the command itself costs on a
    machine that other work keeps busy."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    ran = subprocess.run([sys.executable, "-m", "scaling", *map(str, args)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if ran.returncode not in ok:
        raise SystemExit(f"scaling {' '.join(map(str, args))} exited {ran.returncode}:\n"
                         f"{ran.stderr[-2000:]}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return seconds, cpu, ran.stdout


def has_command(name: str) -> bool:
    ran = subprocess.run([sys.executable, "-m", "scaling", name, "--help"],
                         capture_output=True, text=True, cwd=ROOT)
    return ran.returncode == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", help="a run folder whose records are copied")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)),
                        help="comma-separated record counts")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each command")
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" /
                                                "report_scale.json"))
    parser.add_argument("--keep", help="keep the synthetic runs in this folder")
    options = parser.parse_args()
    sizes = [int(size) for size in options.sizes.split(",")]
    source = source_folder(options.source)
    if source is not None:
        records = [json.loads(line) for line in
                   (source / "results.jsonl").read_text().splitlines() if line.strip()]
    else:
        records = generated_records()
    print(f"{len(records)} records from {source or 'the tests helpers'}", flush=True)
    scratch = Path(options.keep or tempfile.mkdtemp(prefix="report-scale-"))
    commands = {
        "report": lambda base, new, folder: ["report", base],
        "report --html": lambda base, new, folder: ["report", base, "--html"],
        "compare": lambda base, new, folder: ["compare", base, new, "--csv",
                                              folder / "compare.csv"],
        "export": lambda base, new, folder: ["export", base, "--to", folder / "all.parquet"],
    }
    if has_command("history"):
        commands["history add"] = lambda base, new, folder: [
            "history", "add", folder / "history.duckdb", base]
        commands["history"] = lambda base, new, folder: ["history", folder / "history.duckdb"]
    results = {}
    for size in sizes:
        folder = scratch / f"n{size}"
        if folder.exists():
            shutil.rmtree(folder)
        built = time.perf_counter()
        base = write_run(folder / "base", replicated(records, size), source)
        new = write_run(folder / "new", replicated(
            records, size, lambda batch, name: 1 + ((batch * NAMES + name) * 7 % 17 - 8) / 50),
            source)
        print(f"{size} records: written in {time.perf_counter() - built:.1f} s "
              f"({(base / 'results.jsonl').stat().st_size / 1e6:.0f} MB per run)", flush=True)
        walls, cpus, lines = {name: [] for name in commands}, {name: [] for name in commands}, {}
        load = [os.getloadavg()[0]]
        for _ in range(options.runs):
            for name, command in commands.items():
                wall, cpu, stdout = timed(command(base, new, folder),
                                          ok=(0, 1) if name == "compare" else (0,))
                walls[name].append(round(wall, 2))
                cpus[name].append(round(cpu, 2))
                lines[name] = len(stdout.splitlines())
                print(f"  {name}: {wall:.2f} s wall, {cpu:.2f} s CPU ({lines[name]} lines of "
                      f"output)", flush=True)
        load.append(os.getloadavg()[0])
        results[size] = {name: {"wall_s": walls[name], "cpu_s": cpus[name],
                                "median_wall_s": statistics.median(walls[name]),
                                "median_cpu_s": statistics.median(cpus[name]),
                                "output_lines": lines[name]} for name in commands}
        results[size]["load_average"] = load
        if not options.keep:
            shutil.rmtree(folder)
    if not options.keep:
        shutil.rmtree(scratch, ignore_errors=True)
    summary = {}
    if len(sizes) >= 2:
        small, large = sizes[0], sizes[-1]
        growth = TARGET_GROWTH * large / small / 10
        for name in commands:
            found = {}
            for figure in ("wall", "cpu"):
                at_small, at_large = (results[size][name][f"median_{figure}_s"]
                                      for size in (small, large))
                found.update({f"{figure}_s_at_{small}": at_small,
                              f"{figure}_s_at_{large}": at_large,
                              f"{figure}_ratio": round(at_large / at_small, 2),
                              f"{figure}_within_target": at_large <= TARGET_S and
                              at_large / at_small <= growth})
            summary[name] = {**found, "target": name in TARGETED}
    output = {"machine": machine(), "source": str(source or "tests/conftest.py recorded_cell"),
              "source_records": len(records), "runs": options.runs,
              "targets": {"commands": list(TARGETED), "seconds_at_largest": TARGET_S,
                          "growth_for_ten_times_the_records": TARGET_GROWTH},
              "sizes": {str(size): found for size, found in results.items()},
              "summary": summary}
    Path(options.output).write_text(json.dumps(output, indent=2) + "\n")
    for name, found in summary.items():
        print(f"{name}: " + ", ".join(
            f"{figure} {found[f'{figure}_s_at_{small}']:.2f} s at {small}, "
            f"{found[f'{figure}_s_at_{large}']:.2f} s at {large} "
            f"(x{found[f'{figure}_ratio']:.1f})" for figure in ("wall", "cpu")))
    print(f"wrote {options.output}")


if __name__ == "__main__":
    main()
