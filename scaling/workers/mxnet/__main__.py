"""Run one MXNet process of a cell: ``python -m scaling.workers.mxnet CELL_DIR``."""

from scaling.workers.loop import run_worker
from scaling.workers.mxnet.collective import collective
from scaling.workers.mxnet.session import build

if __name__ == "__main__":
    run_worker(build, collective=collective)
