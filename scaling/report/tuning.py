"""The report's "Tuning" section, from a tune's ``tune.json``: the trials over time with the
leader's path, the best, runner-up and default, and the ablation."""

from __future__ import annotations

from typing import Dict, Optional

import matplotlib.pyplot as plt
from markupsafe import Markup

from scaling.report.figures import svg
from scaling.tune.result import read_tune

STAGE_STYLES = {"search": {"marker": "o", "color": "#1f77b4"},
                "final": {"marker": "s", "color": "#2ca02c"}}


def trials_figure(summary: Dict):
    """Each trial's images/sec (with its window's interval) at the time it ended; failed
    trials as crosses on the axis; the leader's median as a step line."""
    figure, axis = plt.subplots(figsize=(8, 4))
    for stage, style in STAGE_STYLES.items():
        trials = [t for t in summary["trials"] if t["stage"] == stage and t["status"] == "ok"]
        if trials:
            minutes = [t["elapsed_s"] / 60 for t in trials]
            values = [t["images_per_sec"] for t in trials]
            errors = [[v - (t["ci95"] or [v, v])[0] for v, t in zip(values, trials)],
                      [(t["ci95"] or [v, v])[1] - v for v, t in zip(values, trials)]]
            axis.errorbar(minutes, values, yerr=errors, linestyle="none", capsize=2,
                          label=f"{stage} trials", **style)
    failed = [t for t in summary["trials"] if t["status"] != "ok"]
    if failed:
        axis.plot([t["elapsed_s"] / 60 for t in failed], [0] * len(failed), "x",
                  color="#d62728", markersize=9, clip_on=False, label="failed trials")
    path = summary["leader_path"]
    if path:
        end = summary["elapsed_s"] / 60
        axis.step([p["elapsed_s"] / 60 for p in path] + [end],
                  [p["images_per_sec"] for p in path] + [path[-1]["images_per_sec"]],
                  where="post", color="grey", linestyle="--", label="leader (median)")
    axis.set_xlabel("minutes into the tune")
    axis.set_ylabel("images/sec")
    axis.set_ylim(bottom=0)
    axis.set_title(f"{summary['workload']} on {summary['devices']} {summary['device_type']} "
                   f"device(s): {len(summary['trials'])} trials in "
                   f"{summary['elapsed_s'] / 60:.1f} of {summary['budget_s'] / 60:.1f} min")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1.0))
    figure.tight_layout()
    return figure


def tuning_section(out_dir) -> Optional[Dict]:
    """The section's figure and tables, or None where no tune wrote the folder."""
    summary = read_tune(out_dir)
    if summary is None:
        return None
    return {**summary, "figure": Markup(svg(trials_figure(summary))),
            "candidates": [(name.replace("_", "-"), summary[name])
                           for name in ("best", "runner_up", "default")]}
