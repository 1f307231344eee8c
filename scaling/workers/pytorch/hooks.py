"""The timed loop's optional hooks of a PyTorch session (``scaling.workers.loop``): the profile
and the communication it cannot see, local steps, the step timer, and torch.compile."""

from __future__ import annotations

import copy
import time


class CudaEventTimer:
    """Step times from CUDA events recorded between the steps."""

    def __init__(self, torch):
        self.torch = torch
        self.events = []

    def mark(self) -> None:
        event = self.torch.cuda.Event(enable_timing=True)
        event.record()
        self.events.append(event)

    def step_times(self):
        return [a.elapsed_time(b) / 1000.0 for a, b in zip(self.events, self.events[1:])]


class TorchHooks:
    """The hooks of :class:`scaling.workers.pytorch.session.TorchSession`, on its ``torch``,
    ``is_gpu``, ``model``, ``loss_fn``, ``parallel``, synthetic ``images`` and ``labels``,
    ``step()``, ``synchronize()`` and ``autocast()``."""

    local_model = None
    """This process's own copy of the model for :meth:`local_steps`, made at their first call."""

    def compile_model(self) -> float:
        """torch.compile the model, compiling it with one untimed step; returns the seconds."""
        self.model = self.torch.compile(self.model)
        started = time.perf_counter()
        self.step()
        self.synchronize()
        return time.perf_counter() - started

    def local_steps(self, count: int) -> None:
        """``count`` forward and backward passes on this process's own copy of the model, with
        no hook, no gradient aggregated and no update."""
        if self.local_model is None:
            model = self.model
            for wrapper in ("_orig_mod", "module"):  # torch.compile's, then DDP's
                model = getattr(model, wrapper, model)
            self.local_model = copy.deepcopy(model)
        for _ in range(count):
            for parameter in self.local_model.parameters():
                parameter.grad = None
            with self.autocast():
                loss = self.loss_fn(self.local_model(self.images), self.labels)
            loss.backward()
        self.synchronize()

    def profile(self, steps: int, path: str) -> bool:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.is_gpu else [])
        exposed = getattr(self.parallel, "exposed_s", None)
        self.exposed = []
        with profile(activities=activities) as profiler:
            started = time.perf_counter()
            for _ in range(steps):
                if exposed:
                    exposed()  # clears what earlier steps left
                self.step()
                if exposed:
                    self.exposed.append(exposed())
            self.synchronize()
            self.profiled_s = time.perf_counter() - started
        profiler.export_chrome_trace(path)
        return self.is_gpu

    def exposed_communication(self):
        """The share of the profiled steps that waited for the gradients' allreduce after the
        backward pass, as the mechanism timed it; None where it was not timed."""
        return sum(self.exposed) / self.profiled_s if self.exposed else None

    def step_timer(self):
        """CUDA events on GPU; on CPU a step has finished when it returns, so chunk means do."""
        return CudaEventTimer(self.torch) if self.is_gpu else None
