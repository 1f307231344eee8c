"""TensorFlow tf.distribute launchers.

``tf-mirrored``: one process per node, MirroredStrategy over its N devices (GPUs, or N logical
CPU devices). ``tf-multiworker``: MultiWorkerMirroredStrategy with one process per CPU device, or
one per node holding all of its GPUs; the harness's spawner gives each process its TF_CONFIG on
free loopback ports.
"""

from __future__ import annotations

from typing import Dict, List

from scaling.launchers import Launcher, register_launcher, thread_env

TF_OPTIONS: Dict[str, object] = {"xla": bool, "mixed_precision": bool}
"""``xla``: compile the step with jit_compile; ``mixed_precision``: Keras mixed_float16."""

_QUIET = {"TF_CPP_MIN_LOG_LEVEL": "1", "KERAS_BACKEND": "tensorflow"}


def _worker(python: str, cell_dir: str) -> List[str]:
    return [python, "-m", "scaling.workers.tf_worker", cell_dir]


@register_launcher
class TfMirrored(Launcher):
    name = "tf-mirrored"
    framework = "tensorflow"
    module = "tensorflow"
    install_hint = "install it with: pip install -e '.[tensorflow]'"
    options = TF_OPTIONS

    def command(self, cell, cell_dir: str, python: str) -> List[str]:
        return _worker(python, cell_dir)

    def processes(self, cell) -> int:
        return cell.nodes

    def env(self, cell) -> Dict[str, str]:
        return {**thread_env(cell.threads_per_device * cell.devices), **_QUIET}


@register_launcher
class TfMultiWorker(TfMirrored):
    name = "tf-multiworker"

    def workers_per_node(self, cell) -> int:
        return 1 if cell.device_type == "gpu" else cell.devices

    def command(self, cell, cell_dir: str, python: str) -> List[str]:
        return [python, "-m", "scaling.workers.spawn", "--tf-config",
                "--processes", str(self.workers_per_node(cell)), "--",
                *_worker(python, cell_dir)]

    def processes(self, cell) -> int:
        return self.workers_per_node(cell) * cell.nodes

    def env(self, cell) -> Dict[str, str]:
        return {**thread_env(cell.threads_per_device), **_QUIET}
