"""The optional hooks of the timed loop (``scaling.workers.loop``) that a JAX session has: local
steps, the profiler and the collective."""

from __future__ import annotations

from scaling.workers.jax.parallel import JaxCollective


class JaxHooks:
    """Mixed into the session, whose ``jax``, ``cell``, ``parallel``, ``steps``, ``step_fn``,
    ``state``, ``images`` and ``labels`` they use."""

    _local_step = None

    def local_steps(self, count: int) -> None:
        """``count`` forward and backward passes on every device of the process, with no
        gradient aggregated and no update; waits for them."""
        if self._local_step is None:
            self._local_step = self.steps.compile_local()
        arguments = (*self.state[:3], self.images, self.labels)
        if self.jax.process_count() > 1:
            arguments = self.jax.tree.map(lambda leaf: leaf.addressable_shards[0].data,
                                          arguments)
        for _ in range(count):
            sums = self._local_step(*arguments)
        self.jax.block_until_ready(sums)

    def profile(self, steps: int, path: str) -> bool:
        from scaling.workers.jax import profile as profiler

        def run_steps():
            for _ in range(steps):
                self.step()
            self.synchronize()

        profiler.profile(self.jax, run_steps, path, self.step_fn.as_text())
        return self.cell["device_type"] == "gpu"

    def collective(self) -> JaxCollective:
        return JaxCollective(self.jax, self.parallel)
