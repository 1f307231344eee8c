"""The search strategies against a device whose memory grows linearly with the batch.

These exercise only the placement of trials; tests/test_maxbatch.py runs real trials.
"""

from __future__ import annotations

import pytest

from scaling.maxbatch.bracket import STRATEGIES, Bracket
from scaling.maxbatch.search import find_max_batches, trial_factory


def linear(batch):
    return 900.0 + 1.5 * batch


def convex(batch):
    """Memory that grows faster than linearly: workspaces that scale with the batch."""
    return 900.0 + 1.2 * batch + 0.002 * batch ** 2


def search(strategy, limit_batch, k=1, start=1, memory=linear, maximum=None):
    """Run a strategy against a device whose memory use is ``memory(batch)``, with capacity
    such that ``limit_batch`` is the largest batch that fits. Returns (answer, smallest OOM,
    trials)."""
    capacity = (memory(limit_batch) + memory(limit_batch + 1)) / 2
    state = Bracket(k=k, start=start, min_batch=start, max_batch=maximum)
    tried = []
    while (batch := STRATEGIES[strategy](state)) is not None:
        assert batch % k == 0 and batch not in tried
        tried.append(batch)
        usage = memory(batch)
        if usage <= capacity:
            state.fits(batch, usage, capacity)
        else:
            state.out_of_memory(batch)
    return state.lo, state.hi, len(tried)


@pytest.mark.parametrize("memory", [linear, convex])
@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
@pytest.mark.parametrize("limit, k", [(272, 1), (318, 1), (37, 1), (150, 8), (1000, 4), (5, 1)])
def test_both_strategies_find_the_exact_largest_batch(strategy, limit, k, memory):
    answer, smallest_oom, _ = search(strategy, limit, k=k, start=k, memory=memory)
    assert answer == limit // k * k
    assert smallest_oom == answer + k


@pytest.mark.parametrize("memory", [linear, convex])
@pytest.mark.parametrize("limit", [272, 318, 600, 1000])
def test_the_memory_model_needs_at_most_60_percent_of_doubling_trials(limit, memory):
    _, _, model = search("model", limit, start=4, memory=memory)
    _, _, doubling = search("doubling", limit, start=4, memory=memory)
    assert model <= 0.6 * doubling


def test_the_search_stops_at_the_maximum_when_nothing_runs_out_of_memory():
    answer, smallest_oom, _ = search("model", 500, maximum=64)
    assert (answer, smallest_oom) == (64, None)


def test_when_even_the_starting_batch_does_not_fit_there_is_no_answer():
    answer, smallest_oom, _ = search("model", 3, start=4)
    assert answer is None and smallest_oom == 4


class FakeDevice:
    """A trial runner that runs nothing: each run's status is ``outcome(batch, attempt,
    purpose)``, its memory ``peak(batch, attempt, purpose)`` (``linear(batch)`` by default)
    against a capacity between ``limit`` and the next batch."""

    def __init__(self, limit, outcome=None, peak=None):
        self.capacity = (linear(limit) + linear(limit + 1)) / 2
        self.outcome = outcome or (lambda batch, attempt, purpose: None)
        self.peak = peak or (lambda batch, attempt, purpose: linear(batch))
        self.trials = []
        """(batch, status) of each trial, in order."""
        self.confirmations = []
        """(batch, status) of each confirmation, in order."""

    def __call__(self, cell):
        batch, purpose = cell.batch_size, cell.purpose
        fits = linear(batch) <= self.capacity
        status = self.outcome(batch, cell.repeat, purpose) or ("ok" if fits else "oom")
        runs = self.confirmations if purpose == "confirmation" else self.trials
        runs.append((batch, status))
        ok = status == "ok"
        peak = self.peak(batch, cell.repeat, purpose) if ok else None
        return {"status": status, "batch_size": batch,
                "error": None if ok else f"{status} at batch {batch}",
                "capped_memory_peak_bytes": peak,
                "memory_capacity_bytes": self.capacity if ok else None,
                "images_per_sec": 100.0 if ok else None, "peak_memory_bytes": peak,
                "wall_s": 1.0}


def search_with_trials(device, k=8, start=8, confirm=True):
    make_trial = trial_factory(framework="torch", launcher="torchrun", workload="cifar10",
                               image_size=32, steps=1, warmup=0, device_type="cpu",
                               threads_per_device=1, memory_limit=2**30)
    [found] = find_max_batches(make_trial, [1], k, start, None, device, confirm=confirm)
    return found


def test_the_smallest_oom_runs_once_more_and_the_answer_is_confirmed_twice_as_a_plain_cell():
    unconfirmed = FakeDevice(150)
    assert search_with_trials(unconfirmed, confirm=False).max_batch == 144
    device = FakeDevice(150)
    found = search_with_trials(device)
    assert (found.max_batch, found.min_oom_batch, found.status) == (144, 152, "ok")
    assert device.trials == unconfirmed.trials + [(152, "oom")]
    assert device.confirmations == [(144, "ok"), (144, "ok")]
    assert (found.confirmations, found.rejected) == (2, None)
    assert found.trials == len(device.trials) + 2 == 8


def test_a_confirmation_runs_the_plain_cells_steps_in_its_own_cell():
    # A trial's timeout stretches to the confirmation's steps, unless the plain cell has one.
    make_trial = trial_factory(framework="torch", launcher="torchrun", workload="cifar10",
                               image_size=32, steps=3, warmup=2, device_type="cpu",
                               memory_limit=2**30, timeout_s=100)
    trial, first, second = (make_trial(1, 64, 0), make_trial(1, 64, 0, confirmation=True),
                            make_trial(1, 64, 1, confirmation=True))
    assert (trial.purpose, trial.steps, trial.warmup, trial.timeout_s) == ("maxbatch", 3, 2, 100)
    assert (first.purpose, first.steps, first.warmup, first.timeout_s) == (
        "confirmation", 20, 5, 500)
    assert len({trial.cell_id, first.cell_id, second.cell_id}) == 3
    sweep_like = trial_factory(plain={"steps": 7, "warmup": 2, "min_time_s": 1.5,
                                      "timeout_s": 60},
                               framework="torch", launcher="torchrun", workload="cifar10",
                               steps=1, warmup=0, device_type="cpu", memory_limit=2**30,
                               timeout_s=100)
    cell = sweep_like(1, 64, 0, confirmation=True)
    assert (cell.steps, cell.warmup, cell.min_time_s, cell.timeout_s) == (7, 2, 1.5, 60)


@pytest.mark.parametrize("failure", ["error", "oom", "crashed"])
def test_a_batch_that_fails_a_confirmation_is_not_the_answer(failure):
    # 144 fits its trial and its first confirmation, and fails its second: the next largest
    # fit is confirmed instead. Only an OOM stands as the smallest OOM (on its evidence).
    device = FakeDevice(150, lambda batch, attempt, purpose:
                        failure if (batch, attempt, purpose) == (144, 1, "confirmation") else None)
    found = search_with_trials(device)
    assert found.status == "ok" and found.max_batch < 144
    assert device.confirmations[:2] == [(144, "ok"), (144, failure)]
    assert device.confirmations[2:] == [(found.max_batch, "ok")] * 2
    assert found.confirmations == 2 and found.rejected == f"144 {failure}"
    assert found.min_oom_batch == (144 if failure == "oom" else 152)
    assert 144 not in [batch for batch, _ in device.trials[-2:]]  # no trial reopens it


def test_more_confirmations_run_while_the_peaks_leave_doubtful_room():
    # Capacity 1125.75; 144 uses 1116 and a run varies by 4: room 5.75 is under twice the
    # spread, so four runs pass before the answer stands.
    device = FakeDevice(150, peak=lambda batch, attempt, purpose: linear(batch) + 4 * attempt % 8)
    found = search_with_trials(device)
    assert found.max_batch == 144 and found.confirmations == 4
    assert device.confirmations == [(144, "ok")] * 4


def test_peaks_that_leave_no_room_for_their_spread_unsettle_the_answer():
    # At 144 the second run's peak is 6 above the first's, leaving 3.75: not reliable.
    device = FakeDevice(150, peak=lambda batch, attempt, purpose:
                        linear(batch) + (6 if (batch, attempt) == (144, 1) else 0))
    found = search_with_trials(device)
    assert found.max_batch < 144 and found.confirmations == 2
    assert found.rejected == "144 unsettled"
    assert device.confirmations[:2] == [(144, "ok"), (144, "ok")]


def test_a_sporadic_oom_below_the_limit_does_not_stand_for_it():
    # The predicted limit, 144, runs out of memory on its first run only.
    device = FakeDevice(150, lambda batch, attempt, purpose:
                        "oom" if (batch, attempt, purpose) == (144, 0, "maxbatch") else None)
    found = search_with_trials(device)
    assert (found.max_batch, found.min_oom_batch) == (144, 152)
    assert [status for batch, status in device.trials if batch == 144] == ["oom", "ok"]
    assert [status for batch, status in device.trials if batch == 152] == ["oom", "oom"]


def test_a_sporadic_fit_above_the_limit_does_not_stand_for_it():
    # 152, one step past the limit, fits on its first run only.
    device = FakeDevice(150, lambda batch, attempt, purpose:
                        "ok" if (batch, attempt, purpose) == (152, 0, "maxbatch") else None)
    found = search_with_trials(device)
    assert (found.max_batch, found.min_oom_batch, found.rejected) == (144, 152, "152 oom")
    assert [status for batch, status in device.trials if batch == 152] == ["ok"]
    assert device.confirmations == [(152, "oom"), (144, "ok"), (144, "ok")]


def test_a_trial_that_fails_otherwise_once_is_run_again_and_the_search_goes_on():
    device = FakeDevice(150, lambda batch, attempt, purpose:
                        "error" if (batch, attempt) == (8, 0) else None)
    found = search_with_trials(device)
    assert (found.max_batch, found.min_oom_batch, found.status) == (144, 152, "ok")
    assert device.trials[:2] == [(8, "error"), (8, "ok")]
    assert found.trials == 9


def test_a_trial_that_fails_otherwise_twice_stops_the_search_and_names_its_batch():
    device = FakeDevice(150, lambda batch, attempt, purpose: "crashed" if batch == 64 else None)
    found = search_with_trials(device)
    assert device.trials == [(8, "ok"), (16, "ok"), (64, "crashed"), (64, "crashed")]
    assert (found.max_batch, found.min_oom_batch, found.trials) == (None, None, 4)
    assert (found.status, found.failed_batch) == ("crashed", 64)
    assert found.error == "batch 64 ended crashed twice: crashed at batch 64"


def test_when_every_candidate_fails_its_confirmation_otherwise_the_search_says_why():
    device = FakeDevice(150, lambda batch, attempt, purpose:
                        "error" if purpose == "confirmation" else None)
    found = search_with_trials(device)
    assert (found.max_batch, found.status, found.failed_batch) == (None, "error", 8)
    assert found.error == "batch 8 failed its confirmation: error at batch 8"
    assert {status for _, status in device.confirmations} == {"error"}
