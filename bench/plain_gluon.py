"""A plain hand-written Gluon multi-context training loop, the reference the harness's MXNet
path is compared with. Runs under MXNet's interpreter:

    python bench/plain_gluon.py WORKLOAD DEVICES BATCH IMAGE_SIZE STEPS WARMUP THREADS OUT_JSON
"""

import json
import sys
import time

import mxnet as mx
from mxnet import autograd, gluon

from workloads import get_workload


def main():
    workload, devices, batch, size, steps, warmup, _threads, out = sys.argv[1:9]
    devices, batch, size = int(devices), int(batch), int(size)
    steps, warmup = int(steps), int(warmup)
    spec = get_workload(workload)
    contexts = [mx.cpu(i) for i in range(devices)]
    net = spec.builder("workloads.gluon_models")(size, spec.classes)
    net.initialize(mx.init.Xavier(), ctx=contexts)
    net.hybridize(static_alloc=True, static_shape=True)
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": 0.01, "momentum": 0.9}, kvstore="local")
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    data = gluon.utils.split_and_load(
        mx.nd.random.uniform(shape=(batch * devices, 3, size, size)), contexts)
    labels = gluon.utils.split_and_load(
        mx.nd.random.randint(0, spec.classes, shape=(batch * devices,)).astype("float32"),
        contexts)
    for index in range(warmup + steps):
        if index == warmup:
            mx.nd.waitall()
            start = time.perf_counter()
        with autograd.record():
            losses = [loss_fn(net(x), y) for x, y in zip(data, labels)]
        for loss in losses:
            loss.backward()
        trainer.step(batch * devices)
    mx.nd.waitall()
    elapsed = time.perf_counter() - start
    with open(out, "w") as result:
        json.dump({"images_per_sec": batch * devices * steps / elapsed}, result)


if __name__ == "__main__":
    main()
