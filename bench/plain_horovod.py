"""A plain hand-written Horovod training loop (PyTorch), the reference the harness's Horovod
cell is compared with.

Run under horovodrun: ``python -m horovod.runner.launch --gloo -np N -H localhost:N python
bench/plain_horovod.py WORKLOAD BATCH IMAGE_SIZE STEPS WARMUP THREADS OUT_JSON``.
Rank 0 writes {"images_per_sec": ...} to OUT_JSON.
"""

import json
import sys
import time

import horovod.torch as hvd
import torch

from workloads import get_workload


def main():
    workload, batch, size, steps, warmup, threads, out = sys.argv[1:8]
    batch, size, steps, warmup = int(batch), int(size), int(steps), int(warmup)
    torch.set_num_threads(int(threads))
    hvd.init()
    spec = get_workload(workload)
    model = spec.builder("workloads.torch_models")(size, spec.classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    loss_fn = torch.nn.CrossEntropyLoss()
    images = torch.randn(batch, 3, size, size)
    labels = torch.randint(0, spec.classes, (batch,))
    for index in range(warmup + steps):
        if index == warmup:
            hvd.barrier()
            start = time.time()
        optimizer.zero_grad()
        loss_fn(model(images), labels).backward()
        optimizer.step()
    hvd.barrier()
    elapsed = time.time() - start
    if hvd.rank() == 0:
        with open(out, "w") as result:
            json.dump({"images_per_sec": batch * steps * hvd.size() / elapsed}, result)
    hvd.shutdown()


if __name__ == "__main__":
    main()
