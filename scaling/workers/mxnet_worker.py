"""One MXNet process driving N contexts: ``python -m scaling.workers.mxnet_worker CELL_DIR``.

Runs under MXNet's own interpreter, so it imports only the standard library, MXNet and the
workload definitions. The global batch is split across contexts once with ``split_and_load``.
MXNet's engine is asynchronous: the timed window and every timed step end with
``mx.nd.waitall()``, and errors raised inside the engine surface there, inside the report.
"""

from __future__ import annotations

import sys
import time

from scaling.workers import common


def train(cell: dict, report: dict) -> None:
    import mxnet as mx
    from mxnet import autograd, gluon

    from workloads import get_workload

    gpu = cell["device_type"] == "gpu"
    contexts = [mx.gpu(i) if gpu else mx.cpu(i) for i in range(cell["devices"])]
    kvstore = cell["options"].get("kvstore", "device" if gpu else "local")
    workload = get_workload(cell["workload"])
    size, batch = cell["image_size"], cell["batch_size"]
    global_batch = batch * len(contexts)

    net = workload.builder("mxnet")(size, workload.classes)
    net.initialize(mx.init.Xavier(), ctx=contexts)
    net.hybridize(static_alloc=True, static_shape=True)
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": 0.01, "momentum": 0.9}, kvstore=kvstore)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    images = gluon.utils.split_and_load(
        mx.nd.random.uniform(shape=(global_batch, 3, size, size)), contexts)
    labels = gluon.utils.split_and_load(
        mx.nd.random.randint(0, workload.classes, shape=(global_batch,)).astype("float32"),
        contexts)

    def step() -> None:
        with autograd.record():
            losses = [loss_fn(net(x), y) for x, y in zip(images, labels)]
        for loss in losses:
            loss.backward()
        trainer.step(global_batch)

    faults = common.FaultInjector(0)
    for index in range(cell["warmup"]):
        faults.at_step(index)
        step()
        mx.nd.waitall()
    report.update(
        params=sum(p.data(contexts[0]).size for p in net.collect_params().values()
                   if p.grad_req != "null"),
        versions={"mxnet": mx.__version__, "cuda": mx.runtime.Features().is_enabled("CUDA")},
        device_name=str(contexts[0]), layout="NCHW", hybridized=True, kvstore=kvstore,
        contexts=len(contexts),
    )
    step_times = []
    start = time.time()
    mark = time.perf_counter()
    for index in range(cell["steps"]):
        faults.at_step(cell["warmup"] + index)
        step()
        mx.nd.waitall()
        now = time.perf_counter()
        step_times.append(now - mark)
        mark = now
    end = time.time()
    times = common.step_time_summary(step_times)
    if gpu:
        # The pooled GPU allocator keeps what it has allocated, so use at the end is the peak.
        info = [mx.context.gpu_memory_info(i) for i in range(len(contexts))]
        used = max(total - free for free, total in info)
        memory = {"peak_memory_bytes": used, "capped_memory_peak_bytes": used,
                  "memory_capacity_bytes": min(total for _, total in info)}
    else:
        memory = {"peak_memory_bytes": common.peak_rss_bytes(), **common.cpu_memory_headroom()}
    report.update(start=start, end=end, images=global_batch * cell["steps"],
                  step_time_median_s=times["median"], step_time_p95_s=times["p95"], **memory)


def main() -> None:
    cell_dir = sys.argv[1]
    common.die_with_parent()
    cell = common.load_cell(cell_dir)
    common.apply_memory_limit(cell["memory_limit"])
    with common.reporting(cell_dir, 0) as report:
        train(cell, report)


if __name__ == "__main__":
    main()
