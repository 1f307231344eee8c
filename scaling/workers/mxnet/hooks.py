"""The timed loop's optional hooks of an MXNet session (``scaling.workers.loop``): the profile
alone (no local steps, step timer or exposed communication)."""

from __future__ import annotations


class MxnetHooks:
    """The hooks of :class:`scaling.workers.mxnet.session.MxnetSession`, on its ``mx``,
    ``gpu``, ``step()`` and ``synchronize()``."""

    def profile(self, steps: int, path: str) -> bool:
        profiler = self.mx.profiler
        profiler.set_config(profile_all=True, filename=path, aggregate_stats=False)
        profiler.set_state("run")
        for _ in range(steps):
            self.step()
        self.synchronize()
        profiler.set_state("stop")
        profiler.dump()
        return self.gpu
