"""Run one TensorFlow process of a cell: ``python -m scaling.workers.tensorflow CELL_DIR``."""

from scaling.workers.loop import run_worker
from scaling.workers.tensorflow.collective import collective
from scaling.workers.tensorflow.session import build

if __name__ == "__main__":
    # The cap is TensorFlow's own allocator limit (cap_cpu_allocator), not an RLIMIT.
    run_worker(build, cap_heap=False, collective=collective)
