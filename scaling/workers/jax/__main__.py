"""Run one JAX process of a cell: ``python -m scaling.workers.jax CELL_DIR``."""

from scaling.workers.jax.session import build, collective
from scaling.workers.loop import run_worker

if __name__ == "__main__":
    run_worker(build, cap_heap=False, collective=collective)
