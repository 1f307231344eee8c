"""Where a profiled step's time goes: its trace's events split into compute, communication the
compute does not hide, and idle time, with the communication that a launcher's own threads run
beside the compute told apart from a device waiting in its collective. The events are written
here as the profilers write them; `tests/test_noise_telemetry_profile.py` profiles real cells."""

from __future__ import annotations

import pytest

from scaling.workers.breakdown import step_breakdown, with_exposed_communication


def test_communication_timed_outside_the_trace_is_taken_from_idle_then_compute():
    shares = {"compute": 0.8, "communication": 0.0, "idle": 0.2}
    assert with_exposed_communication(shares, 0.1) == pytest.approx(
        {"compute": 0.8, "communication": 0.1, "idle": 0.1})
    assert with_exposed_communication(shares, 0.3) == pytest.approx(
        {"compute": 0.7, "communication": 0.3, "idle": 0.0})


def test_breakdown_counts_only_communication_that_compute_does_not_hide():
    events = [
        {"name": "aten::conv2d", "ts": 0, "dur": 40, "cat": "cpu_op", "ph": "X"},
        {"name": "gloo:all_reduce", "ts": 30, "dur": 30, "cat": "cpu_op", "ph": "X"},
        {"name": "aten::add_", "ts": 80, "dur": 20, "cat": "cpu_op", "ph": "X"},
    ]
    # span 100: compute 60, communication 60-40 = 20 not hidden, idle 60..80 = 20; one thread
    # computes and communicates in turn, so nothing of it ran beside the compute
    assert step_breakdown(events, on_device=False) == pytest.approx(
        {"compute": 0.6, "communication": 0.2, "idle": 0.2, "communication_beside": 0.0})


def test_communication_beside_the_compute_is_what_runs_under_threads_that_never_communicate():
    def event(name, ts, dur, tid):
        return {"name": name, "ts": ts, "dur": dur, "cat": "cpu_op", "ph": "X", "pid": 1,
                "tid": tid}

    # A launcher's communication thread (2) beside the training thread (1), as DDP runs it:
    # 20 of its 30 under the compute of a thread that never communicates.
    beside = [event("aten::conv2d", 0, 50, 1), event("gloo:all_reduce", 30, 30, 2),
              event("aten::add_", 80, 20, 1)]
    assert step_breakdown(beside, on_device=False) == pytest.approx(
        {"compute": 0.7, "communication": 0.1, "idle": 0.2, "communication_beside": 0.2})
    # Two devices of one process (threads 1 and 2), each computing and then reducing (named as
    # XLA names them on CPU): thread 2 waits in its allreduce while thread 1 still computes.
    # That is a wait, not overlap.
    waiting = [event("conv", 0, 60, 1), event("conv", 0, 40, 2),
               event("collective:all-reduce", 40, 30, 2),
               event("collective:all-reduce", 60, 10, 1)]
    assert step_breakdown(waiting, on_device=False) == pytest.approx(
        {"compute": 60 / 70, "communication": 10 / 70, "idle": 0.0, "communication_beside": 0.0})
