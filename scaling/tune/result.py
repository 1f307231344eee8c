"""What a tune gives: the best configuration and the runner-up with their intervals, the
ablation, ``tune.json`` (read by the report's "Tuning" section) and ``best.yaml``, a sweep
file that ``scaling sweep`` runs as it is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional

import yaml

from scaling.tune.search import Candidate, Tuner, ablated
from scaling.uncertainty import ratio_interval

TUNE_FILE = "tune.json"
BEST_FILE = "best.yaml"


def figure(found: Optional[Candidate]) -> Optional[Dict]:
    """A candidate's configuration, median images/sec, interval and number of figures."""
    if found is None or not found.figures():
        return None
    median, interval = found.estimate()
    return {"config": found.config.label(), "knobs": found.config.knobs(),
            "images_per_sec": median, "ci95": interval, "figures": len(found.figures())}


def _ahead(upper: Dict, lower: Dict) -> bool:
    """Whether ``upper``'s interval lies wholly above ``lower``'s."""
    return bool(upper["ci95"] and lower["ci95"]) and upper["ci95"][0] > lower["ci95"][1]


def ablation(tuner: Tuner, best: Candidate) -> List[Dict]:
    """Each knob that ``best`` (the search's leader) sets otherwise than the default, and what
    putting it back costs: best / ablated - 1, with the interval of that ratio; ``effect``:
    ``helps`` or ``hurts`` where the two intervals do not overlap."""
    rows = []
    best_figure = figure(best)
    for knob, config in ablated(best.config, tuner.default):
        measured = figure(tuner.candidates.get(config))
        row = {"knob": knob, "best": best.config.knobs().get(knob),
               "default": config.knobs().get(knob, "unset"), "config": config.label(),
               "images_per_sec": None, "ci95": None, "contribution": None,
               "contribution_ci95": None, "effect": None}
        if measured:
            ratio = best_figure["images_per_sec"] / measured["images_per_sec"]
            interval = ratio_interval(ratio, best_figure["ci95"], best_figure["images_per_sec"],
                                      measured["ci95"], measured["images_per_sec"])
            row.update(images_per_sec=measured["images_per_sec"], ci95=measured["ci95"],
                       contribution=ratio - 1,
                       contribution_ci95=[interval[0] - 1, interval[1] - 1] if interval else None,
                       effect="helps" if _ahead(best_figure, measured) else
                       "hurts" if _ahead(measured, best_figure) else "within the intervals")
        rows.append(row)
    return rows


def verdict(best: Optional[Dict], default: Optional[Dict], leader: Optional[Dict]) -> str:
    if best is None:
        return "no trial ended ok: nothing to recommend"
    if leader and leader["config"] != best["config"]:
        return (f"the search's leader ({leader['config']}) fell behind in the final rounds; "
                + verdict(best, default, None))
    if default is None:
        return "the default configuration did not run ok; the best is the fastest that did"
    if best["config"] == default["config"]:
        return "the default configuration is the fastest found: no knob mattered here"
    if _ahead(best, default):
        gain = best["images_per_sec"] / default["images_per_sec"] - 1
        return (f"the best is ahead of the default by {gain:+.1%}, more than both intervals")
    return ("no knob mattered here: the best and the default overlap within their "
            "intervals")


def summarize(tuner: Tuner, settings: Dict) -> Dict:
    """Everything ``tune.json`` holds."""
    best, leader = tuner.best, (tuner.contenders or [None])[0]
    default = figure(tuner.candidates.get(tuner.default))
    best_figure = figure(best)
    return {
        **settings,
        "elapsed_s": round(tuner.budget.elapsed(), 1),
        "trials": [{"stage": trial["stage"], "rung": trial["rung"],
                    "config": trial["config"].label(), "knobs": trial["config"].knobs(),
                    "cell": trial["record"]["cell"], "status": trial["record"]["status"],
                    "images_per_sec": trial["record"].get("images_per_sec"),
                    "ci95": trial["record"].get("images_per_sec_ci95"),
                    "started_at": trial["record"].get("started_at"),
                    "wall_s": trial["record"].get("wall_s"), "elapsed_s": trial["elapsed_s"]}
                   for trial in tuner.trials],
        "leader_path": tuner.leader_path,
        "dropped": {found.config.label(): found.dropped
                    for found in tuner.candidates.values() if found.dropped},
        "best": best_figure,
        "runner_up": figure(tuner.runner_up),
        "default": default,
        "tied_with_best": [found.config.label() for found in tuner.ranked()
                           if best_figure and found is not best
                           and not _ahead(best_figure, figure(found))],
        "ablation_of": figure(leader),
        "ablation": ablation(tuner, leader) if leader else [],
        "verdict": verdict(best_figure, default, figure(leader)),
    }


def best_sweep(summary: Dict, best: Candidate, window_s: float) -> Dict:
    """A sweep file of the best configuration over the device counts asked for, each cell
    timed as long as the final phase's windows and run three times."""
    config = best.config
    sweep = {
        "name": f"tuned-{summary['workload']}",
        "frameworks": {config.framework: {"launchers": [config.launcher],
                                          "options": dict(config.options)}},
        "workloads": [summary["workload"]],
        "batch_sizes": [best.figures()[0]["batch_size"]],
        "devices": summary["device_counts"],
        "device_type": summary["device_type"],
        "steps": summary["steps"], "warmup": summary["warmup"],
        "min_time_s": window_s, "repeats": 3,
    }
    for key in ("image_size", "threads_per_device", "memory_limit", "allow_oversubscribe"):
        if summary.get(key) is not None:
            sweep[key] = summary[key]
    return sweep


def write_results(out_dir, summary: Dict, sweep: Optional[Dict]) -> List[Path]:
    out_dir = Path(out_dir)
    written = [out_dir / TUNE_FILE]
    written[0].write_text(json.dumps(summary, indent=2, default=str) + "\n")
    if sweep:
        path = out_dir / BEST_FILE
        path.write_text("# The best configuration that scaling tune found; run it with\n"
                        f"# scaling sweep {path}\n" + yaml.safe_dump(sweep, sort_keys=False))
        written.append(path)
    return written


def read_tune(out_dir) -> Optional[Dict]:
    path = Path(out_dir) / TUNE_FILE
    return json.loads(path.read_text()) if path.exists() else None
