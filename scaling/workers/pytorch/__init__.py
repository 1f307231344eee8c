"""One PyTorch process: ``python -m scaling.workers.pytorch CELL_DIR``.

Started by a launcher that sets the process's ranks (torchrun, or horovodrun). The cell's
``data_parallel`` picks the mechanism: ``ddp`` (DistributedDataParallel over gloo on CPU and NCCL
on GPU) or ``horovod`` (``hvd.DistributedOptimizer`` after a broadcast of the parameters and the
optimizer state; NCCL on GPU where the build has it, gloo otherwise). Synthetic data is made once
on the device. Step times on GPU come from CUDA events, so timing adds no host synchronization
inside the window.

Options: ``amp`` (autocast: true picks bf16 on CPU and fp16 with a gradient scaler on GPU;
``fp16`` or ``bf16`` choose), ``channels_last`` (model and data in NHWC memory format),
``compile`` (torch.compile, compiled by one untimed step before the warm-up) and
``cudnn_benchmark``. Modes: ``train``; ``forward`` (inference mode, no gradient, no
data-parallel wrapper); ``forward_backward`` (loss and backward, whose gradients DDP or Horovod
aggregate, no optimizer step). The batch is seeded by the rank, so every replica's differs.

The package: ``session`` (the session the timed loop drives, and ``build``), ``model`` (the
model, its optimizer and loss), ``hooks`` (the loop's optional hooks: profile, local steps,
exposed communication, step timer, compile), ``device`` (the device, its memory and versions),
``parallel`` (the data-parallel mechanisms), ``collective`` (their allreduce), ``input`` (real
images) and ``flops`` (the FLOPs counter).
"""
