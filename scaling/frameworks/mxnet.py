"""MXNet with Gluon. MXNet 1.9.1 needs numpy<1.24, so its workers run under their own
interpreter: ``frameworks.mxnet.python`` in a sweep, ``--python`` on the command line, the
``SCALING_MXNET_PYTHON`` environment variable, or by default ``.venv-mxnet/bin/python`` in the
project (``make mxnet-env`` creates it)."""

from scaling.frameworks.base import Framework, register_framework

register_framework(Framework(
    name="mxnet",
    module="mxnet",
    install_hint=("create its environment with: make mxnet-env (python3 -m venv .venv-mxnet "
                  "&& .venv-mxnet/bin/pip install mxnet==1.9.1 'numpy<1.24')"),
    worker="scaling.workers.mxnet",
    models="workloads.gluon_models",
    default_launcher="mxnet-kvstore",
    options={"amp": bool},
    # One engine worker thread per CPU context, each op using the device's threads.
    env={"MXNET_CPU_WORKER_NTHREADS": "1", "MXNET_ENGINE_TYPE": "ThreadedEnginePerDevice"},
    python_env_var="SCALING_MXNET_PYTHON",
    venv=".venv-mxnet",
    # Measured with MXNet 1.9.1: 384 MiB crashed at start-up.
    min_memory_limit=512 * 2**20,
    packages=("mxnet",),
    colour="#1f77b4",
))
