"""The search of ``scaling tune``: successive halving that drops a candidate only on intervals.

Rung 0 opens candidates one at a time (the default configuration first, then others drawn
from the space) with a short timed window, until its share of the budget is spent. Each later
rung gives every candidate still in the race one more trial with a window twice as long, the
fastest first. A candidate leaves the race when a trial fails (OOM, crash, timeout: it is
recorded like any cell) or when, with at least two figures of its own, its interval lies below
that of the leader's, which has two as well; never on one figure. The final phase measures the
leader, the default and the runner-up again, and the leader with each of its knobs back at its
default (the ablation), in alternating order, within the same budget.

Every trial is a cell record; a trial whose cell is already recorded (a killed tune resumed
with ``--resume``) is read back, not run, and its wall time counts against the budget.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from scaling.errors import ScalingError
from scaling.tune.space import Config, Space, make_config
from scaling.uncertainty import repeats_and_window_interval

FIRST_WINDOW_S = 4.0
"""The timed window of rung 0; each rung doubles it, up to :data:`LONGEST_WINDOW_S`."""
LONGEST_WINDOW_S = 32.0
RUNGS = 8
"""The most rungs a search climbs, however much budget is left."""
OPENING_SHARE = 0.4
"""The share of the search's time (the budget less the final phase) that rung 0 may spend
opening candidates."""
POOL = 256
"""Candidates drawn from the space, in the order rung 0 opens them."""
FINAL_ROUNDS = 2
SLOWEST_TRIAL = 3.0
"""A trial may take at most this many times the median wall time of the ok trials so far
(and at least a minute): a configuration whose few steps take that much longer cannot lead,
and would spend the budget of several others."""
FIRST_GUESS_S = 60.0
"""A trial's cost before any has run: process start, warm-up and window."""


@dataclass
class Candidate:
    config: Config
    records: List[Dict] = field(default_factory=list)
    dropped: str = ""
    """Why it left the race, or empty while it is in."""

    def figures(self) -> List[Dict]:
        return [record for record in self.records if record["status"] == "ok"]

    def estimate(self) -> Optional[Tuple[float, Optional[List[float]]]]:
        """The median images/sec of its figures and its interval, or None before one."""
        figures = self.figures()
        if not figures:
            return None
        values = [record["images_per_sec"] for record in figures]
        return statistics.median(values), repeats_and_window_interval(
            values, [record.get("images_per_sec_ci95") for record in figures])

    def median(self) -> float:
        found = self.estimate()
        return found[0] if found else 0.0


def below(lower: Candidate, upper: Candidate) -> bool:
    """Whether ``lower``'s interval lies wholly below ``upper``'s, both from two figures or
    more."""
    if len(lower.figures()) < 2 or len(upper.figures()) < 2:
        return False
    (_, low), (_, high) = lower.estimate(), upper.estimate()
    return bool(low and high) and low[1] < high[0]


class Budget:
    """Wall-clock seconds: those since the tune started here, and those of the trials read
    back from an earlier, killed run."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.started = time.monotonic()
        self.replayed = 0.0

    def elapsed(self) -> float:
        return time.monotonic() - self.started + self.replayed

    def left(self) -> float:
        return self.seconds - self.elapsed()


TrialCell = Callable[[Config, int, float, float], object]
"""(configuration, its trial number, window seconds, timeout seconds) -> the trial's cell."""


class Tuner:
    def __init__(self, space: Space, trial_cell: TrialCell,
                 run: Callable[[object], Optional[Dict]],
                 recorded: Dict[str, Dict], budget: Budget, seed: int = 0,
                 on_trial: Callable[["Tuner", Dict], None] = lambda tuner, record: None):
        self.space, self.trial_cell, self.run, self.recorded = space, trial_cell, run, recorded
        self.budget, self.seed, self.on_trial = budget, seed, on_trial
        self.candidates: Dict[Config, Candidate] = {}
        self.trials: List[Dict] = []
        """Each trial: its stage, rung, configuration and record."""
        self.leader_path: List[Dict] = []
        self.default = space.default()
        self.window_s = FIRST_WINDOW_S
        """The timed window of the latest rung, which the final phase keeps."""
        self.contenders: List[Candidate] = []
        """The leader and the runner-up when the search ended; the ablation puts back the
        leader's knobs."""
        self.best: Optional[Candidate] = None
        self.runner_up: Optional[Candidate] = None
        """The fastest two, by median, of the search's leader, its runner-up and the default
        after the final phase (the ablation's configurations never take their place)."""

    def candidate(self, config: Config) -> Candidate:
        return self.candidates.setdefault(config, Candidate(config))

    def alive(self) -> List[Candidate]:
        return [found for found in self.candidates.values()
                if not found.dropped and found.figures()]

    def ranked(self) -> List[Candidate]:
        """The candidates in the race, fastest (by median) first."""
        return sorted(self.alive(), key=Candidate.median, reverse=True)

    def leader(self) -> Optional[Candidate]:
        ranked = self.ranked()
        return ranked[0] if ranked else None

    def trial_cost(self, config: Config, window_s: float) -> float:
        """What a trial is expected to take: the process start and warm-up seen in this
        framework's trials so far (their wall time less their window), plus the window."""
        starts = [record["wall_s"] - (record.get("timed_window_s") or 0)
                  for stage in self.trials for record in [stage["record"]]
                  if record["framework"] == config.framework]
        return (statistics.median(starts) if starts else FIRST_GUESS_S) + window_s

    def final_configs(self) -> List[Config]:
        """What the final phase measures: the leader, the default, the runner-up, and the
        leader with each knob back at its default."""
        ranked = self.ranked()
        if not ranked:
            return []
        configs = [ranked[0].config, self.default, *[found.config for found in ranked[1:2]],
                   *(config for _, config in ablated(ranked[0].config, self.default))]
        return list(dict.fromkeys(configs))

    def final_cost(self, window_s: float, configs: Optional[List[Config]] = None) -> float:
        return sum(self.trial_cost(config, window_s)
                   for config in (self.final_configs() if configs is None else configs))

    def affords(self, config: Config, window_s: float, reserve: float = 0.0) -> bool:
        return self.trial_cost(config, window_s) + reserve <= self.budget.left()

    def trial(self, config: Config, window_s: float, stage: str, rung: int) -> Optional[Dict]:
        """Run (or read back) one trial of ``config``; its record, or None when the
        configuration cannot make a cell here (it leaves the race, with the reason)."""
        found = self.candidate(config)
        slack = 0.05 * self.budget.seconds
        timeout = max(self.budget.left() + slack, slack)
        walls = [trial["record"]["wall_s"] for trial in self.trials
                 if trial["record"]["status"] == "ok"]
        if walls:
            timeout = min(timeout, max(SLOWEST_TRIAL * statistics.median(walls), 60.0))
        try:
            cell = self.trial_cell(config, len(found.records), window_s, timeout)
        except ScalingError as error:
            found.dropped = f"refused: {error}"
            return None
        record = self.recorded.get(cell.cell_id)
        if record is None:
            record = self.run(cell)
            if record is None:
                found.dropped = "its trial was never run (not_run)"
                return None
            self.recorded[cell.cell_id] = record
        else:
            self.budget.replayed += record.get("wall_s") or 0.0
        found.records.append(record)
        # A timeout at the end of the budget says nothing about the configuration.
        cut = record["status"] == "timeout" and self.budget.left() <= slack
        if record["status"] != "ok" and not cut:
            found.dropped = f"trial {record['status']}: {record.get('error') or ''}".strip()
        self.trials.append({"stage": stage, "rung": rung, "config": config, "record": record,
                            "elapsed_s": round(self.budget.elapsed(), 1)})
        self._follow_leader()
        self.on_trial(self, record)
        return record

    def _follow_leader(self) -> None:
        leader = self.leader()
        if leader and (not self.leader_path
                       or self.leader_path[-1]["config"] != leader.config.label()):
            self.leader_path.append({"trial": len(self.trials),
                                     "elapsed_s": self.trials[-1]["elapsed_s"],
                                     "config": leader.config.label(),
                                     "images_per_sec": leader.median()})

    def drop_separated(self) -> None:
        """Drop each candidate whose interval lies below the leader's."""
        backed = [found for found in self.alive() if len(found.figures()) >= 2]
        if not backed:
            return
        reference = max(backed, key=Candidate.median)
        for found in backed:
            if below(found, reference):
                median, interval = reference.estimate()
                found.dropped = (f"below the leader: {found.median():.1f} img/s against "
                                 f"{median:.1f} [{interval[0]:.1f}, {interval[1]:.1f}]")

    def search(self) -> None:
        """Rung 0, then longer rungs while two candidates or more are in the race and their
        trials fit beside the final phase."""
        for index, config in enumerate(self.space.sample(POOL, self.seed)):
            reserve = self.final_cost(self.window_s * 4) if index >= 2 else 0.0
            opening = OPENING_SHARE * (self.budget.seconds - reserve)
            if index and (not self.affords(config, self.window_s, reserve)
                          or (index >= 2 and self.budget.elapsed() > opening)):
                break
            self.trial(config, self.window_s, "search", 0)
        rung = 1
        while len(self.alive()) > 1 and rung < RUNGS:
            window = min(self.window_s * 2, LONGEST_WINDOW_S)
            ran = False
            for found in sorted(self.alive(), key=Candidate.median, reverse=True):
                if self.affords(found.config, window, self.final_cost(window)):
                    self.trial(found.config, window, "search", rung)
                    ran = True
            self.drop_separated()
            if not ran:
                break
            self.window_s = window
            rung += 1

    def final(self) -> None:
        """Rounds of the final configurations, in alternating order, while a whole round fits
        (the first round: as much of it as fits, most important first)."""
        self.contenders = self.ranked()[:2]
        configs, window = self.final_configs(), self.window_s
        for round_ in range(FINAL_ROUNDS):
            if round_ and self.budget.left() < self.final_cost(window, configs):
                break
            for config in (configs if round_ % 2 == 0 else reversed(configs)):
                if self.candidate(config).dropped.startswith("refused") or \
                        not self.affords(config, window):
                    continue
                self.trial(config, window, "final", round_)

    def tune(self) -> None:
        """The search, the final phase, and then the best and the runner-up: the fastest two,
        by median, of the search's leader, its runner-up and the default that never failed."""
        self.search()
        self.final()
        pool = {found.config: found
                for found in [*self.contenders, self.candidates.get(self.default)] if found}
        contenders = [found for found in pool.values() if found.figures()
                      and not found.dropped.startswith(("trial", "refused"))]
        ranked = sorted(contenders, key=Candidate.median, reverse=True)
        self.best, self.runner_up = (ranked + [None, None])[:2]


def ablated(best: Config, default: Config) -> List[Tuple[str, Config]]:
    """(knob, ``best`` with that knob back at its default) for each knob it sets otherwise:
    the framework (under its default launcher where the best's does not start it), the
    launcher, the batch, each option; options that no longer apply are dropped."""
    found = []
    options = dict(best.options)
    if best.framework != default.framework:
        found.append(("framework", make_config(default.framework, default.launcher,
                                               best.batch_size, options)))
    elif best.launcher != default.launcher:
        found.append(("launcher", make_config(best.framework, default.launcher,
                                              best.batch_size, options)))
    if best.batch_size != default.batch_size:
        found.append(("batch_size", make_config(best.framework, best.launcher,
                                                default.batch_size, options)))
    for key in options:
        found.append((key, make_config(best.framework, best.launcher, best.batch_size,
                                       {k: v for k, v in options.items() if k != key})))
    return found
