"""The optional hooks of the timed loop (``scaling.workers.loop``) that a TensorFlow session
has: local steps, the profiler and the collective."""

from __future__ import annotations

from typing import Optional

from scaling.workers.tensorflow import profile as profiler
from scaling.workers.tensorflow.collective import TensorFlowCollective


class TensorFlowHooks:
    """Mixed into the session, whose ``tf``, ``cell``, ``rank``, ``strategy``, ``parallel``,
    ``steps``, ``images`` and ``labels`` they use."""

    _local_step = None

    def local_steps(self, count: int) -> None:
        """``count`` forward and backward passes on every replica of the process, with no
        gradient aggregated (the tape is not the mechanism's) and no update."""
        if self._local_step is None:
            self._local_step = self.steps.local(self.images, self.labels)
        for _ in range(count):
            results = self._local_step()
        for result in results:
            result.numpy()

    def collective(self) -> TensorFlowCollective:
        """The allreduce of the strategy that aggregates this session's gradients."""
        return TensorFlowCollective(self.tf, self.parallel, self.strategy)

    def _run(self, steps: int) -> None:
        for _ in range(steps):
            self.step()
        self.synchronize()

    def profile(self, steps: int, path: str) -> Optional[bool]:
        """The Chrome trace of ``steps`` steps under TensorFlow's profiler
        (``scaling.workers.tensorflow.profile``). Rank 0 only (None elsewhere)."""
        if self.rank > 0:
            # A second profiling worker of one MultiWorkerMirroredStrategy cluster dies
            # ("free(): invalid pointer"), so only rank 0 profiles; the others step along.
            self._run(steps)
            return None
        profiler.profile(self.tf, lambda: self._run(steps), path)
        return self.cell["device_type"] == "gpu"
