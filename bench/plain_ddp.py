"""A plain hand-written DDP training loop, the reference the harness is compared with.

Run under torchrun: ``python -m torch.distributed.run --standalone --nproc-per-node N
bench/plain_ddp.py WORKLOAD BATCH IMAGE_SIZE STEPS WARMUP THREADS OUT_JSON``.
Rank 0 writes {"images_per_sec": ...} to OUT_JSON.
"""

import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from workloads import get_workload


def main():
    workload, batch, size, steps, warmup, threads, out = sys.argv[1:8]
    batch, size, steps, warmup = int(batch), int(size), int(steps), int(warmup)
    torch.set_num_threads(int(threads))
    dist.init_process_group("gloo")
    spec = get_workload(workload)
    model = DistributedDataParallel(spec.builder("workloads.torch_models")(size, spec.classes))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    images = torch.randn(batch, 3, size, size)
    labels = torch.randint(0, spec.classes, (batch,))
    for index in range(warmup + steps):
        if index == warmup:
            dist.barrier()
            start = time.time()
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(images), labels).backward()
        optimizer.step()
    dist.barrier()
    elapsed = time.time() - start
    if dist.get_rank() == 0:
        with open(out, "w") as result:
            json.dump({"images_per_sec": batch * steps * dist.get_world_size() / elapsed}, result)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", sys.argv[6])
    main()
