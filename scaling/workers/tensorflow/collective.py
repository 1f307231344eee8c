"""The allreduce of a TensorFlow process's strategy, alone or beside its session."""

from __future__ import annotations

from scaling.workers.tensorflow.device import configure_devices
from scaling.workers.tensorflow.strategies import STRATEGIES


class TensorFlowCollective:
    """The allreduce of a strategy (``scaling.workers.collective``): the replica context's
    ``all_reduce`` under mirrored and multiworker (their cross-device ops), Horovod's allreduce
    under horovod; one buffer per replica of this process."""

    def __init__(self, tf, parallel, strategy):
        self.tf, self.parallel, self.strategy = tf, parallel, strategy
        self.devices = parallel.replicas(strategy)
        self._sum = parallel.allreduce_function(strategy)
        self._total = parallel.sum_function(strategy)
        self.values = None

    def _fill(self, count: int, value: float) -> None:
        tf = self.tf
        self.values = self.strategy.experimental_distribute_values_from_function(
            lambda context: tf.fill([count], tf.constant(value, tf.float32)))

    def prepare(self, count: int) -> None:
        self._fill(count, 1.0)

    def zero(self) -> None:
        self._fill(int(self._local()[0].shape[0]), 0.0)

    def _local(self):
        return self.strategy.experimental_local_results(self.values)

    def allreduce(self) -> None:
        self.values = self._sum(self.values)

    def first_value(self) -> float:
        return float(self._local()[0][0].numpy())

    def synchronize(self) -> None:
        for value in self._local():
            value[0].numpy()

    def barrier(self) -> None:
        self._total(self.tf.constant(1.0)).numpy()

    def finish(self) -> dict:
        self.parallel.finish()
        return {}


def collective(cell: dict, report: dict, rank: int) -> TensorFlowCollective:
    """The collective alone, for a cell of purpose ``allreduce``."""
    import tensorflow as tf

    parallel = STRATEGIES[cell["data_parallel"]](tf, cell)
    devices = configure_devices(tf, cell, cell["local_devices"], first_gpu=parallel.first_gpu)
    report.update(versions={"tensorflow": tf.__version__, **parallel.versions()},
                  device_name=devices[0], local_devices=cell["local_devices"])
    return TensorFlowCollective(tf, parallel, parallel.make_strategy(devices))
