"""The search strategies against a device whose memory grows linearly with the batch.

These exercise only the placement of trials; tests/test_maxbatch.py runs real trials.
"""

from __future__ import annotations

import pytest

from scaling.maxbatch.bracket import STRATEGIES, Bracket


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
