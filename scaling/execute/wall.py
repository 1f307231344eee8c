"""Where a cell's wall time went: ``wall_breakdown``, seconds by phase, from the edges the
harness and the cell's first rank note on one clock (the host that makes the record).

The phases, in the order they run:

- ``before_launch``: the harness before the process tree (fingerprint, ceiling, and without
  telemetry a look at the machine, or a wait for quiet);
- ``start``: the process tree's start until the first rank's worker runs: the launcher (its
  agent, as torchrun's or horovodrun's, imports its framework first) and the interpreter; in a
  local sweep's first shared cell, the start of the trees that begin together, framework
  imports included (``scaling.execute.trees``);
- ``build``: from there to its first step: the framework's import, the rendezvous, the model,
  the FLOP count (once per user) and the matmul probe (once per run);
- ``warmup``: the warm-up steps, the calibration, and any window timed again
  (``scaling.workers.loop.timed_window``), up to the start of the counted window;
- ``window``: the counted window;
- one entry per reference that ran after it (:data:`REFERENCES`): the real-data figures
  (``input``), the profiled steps (``profile``), the gradients' allreduce (``allreduce``), the
  local steps (``local_steps``) and the local steps with an allreduce beside them
  (``communicating_steps``);
- ``teardown``: the last reference's end to the tree's exit (the rank's report, interpreter and
  launcher exit);
- ``after``: the harness after the tree, up to the record.

``total`` is their sum, the cell's wall time as its harness saw it. Where the first rank noted
no edges (a cell that failed before its first step), the tree's time is ``start``.
"""

from __future__ import annotations

from typing import Dict, List, Optional

REFERENCES = ("input", "profile", "allreduce", "local_steps", "communicating_steps")
"""The measurements after the window, in the order they run."""


def wall_breakdown(cell_start: float, tree_start: float, tree_end: float, record_at: float,
                   report: Optional[Dict]) -> Dict[str, float]:
    """Seconds per phase (module doc) from the harness's wall-clock edges and the first rank's
    ``report`` (its ``marks`` and window ``start`` and ``end``), rounded to milliseconds."""
    marks = (report or {}).get("marks") or {}
    ends = [("before_launch", tree_start)]
    if "first_step" in marks and report.get("end") is not None:
        ends += [("start", marks.get("entered", marks["first_step"])),
                 ("build", marks["first_step"]), ("warmup", report["start"]),
                 ("window", report["end"])]
        ends += [(name, marks[name]) for name in REFERENCES if name in marks]
        ends.append(("teardown", tree_end))
    else:
        ends.append(("start", tree_end))
    ends.append(("after", record_at))
    phases, begin = {}, cell_start
    for name, end in ends:
        phases[name] = round(max(0.0, end - begin), 3)
        begin = max(begin, end)
    phases["total"] = round(record_at - cell_start, 3)
    return phases


def window_share(records: List[Dict]) -> Optional[Dict[str, float]]:
    """The windows' seconds, the cells' wall seconds and the share, over every record that has
    a ``wall_breakdown``; None where none has."""
    timed = [record["wall_breakdown"] for record in records if record.get("wall_breakdown")]
    if not timed:
        return None
    windows = sum(phases.get("window", 0.0) for phases in timed)
    total = sum(phases["total"] for phases in timed)
    return {"window_s": windows, "wall_s": total, "share": windows / total if total else 0.0}
