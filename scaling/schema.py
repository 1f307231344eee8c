"""The one definition of what the harness writes: statuses, rank reports and cell records.

The field list of docs/results.md and the tests come from here (the report's own columns and
the CSV's order, from ``scaling.report.columns``). Standard library only: workers import it
under any interpreter.
"""

from __future__ import annotations

from typing import Dict

STATUSES: Dict[str, str] = {
    "ok": "every rank finished its timed window",
    "oom": "a rank ran out of device memory (CUDA, or the CPU memory cap), on the evidence in "
           "oom_evidence",
    "timeout": "no result within the cell's timeout; the process tree was killed",
    "crashed": "a rank died without reporting, for example killed by a signal",
    "error": "a rank raised an error other than out-of-memory",
    "env_error": "the framework or its interpreter is missing, or the node cannot run the "
                 "cell (a multi-GPU cell on MIG instances); nothing was run",
    "cancelled": "the scheduler's job was cancelled",
    "node_fail": "the scheduler lost a node of the job",
    "preempted": "the scheduler preempted the job",
}
"""Every status a cell can end with."""

FAILED_RANK_STATUSES = ("oom", "error", "crashed", "terminated")
"""Statuses a rank report can carry besides ``ok``; ``terminated`` means stopped by SIGTERM."""

RANK_REPORT_FIELDS: Dict[str, str] = {
    "rank": "global rank of the reporting process",
    "pid": "its process id",
    "status": "ok, or one of " + ", ".join(FAILED_RANK_STATUSES),
    "error": "one-line reason when not ok",
    "oom_evidence": "with status oom, why (the framework's own out-of-memory error, or under "
                    "the heap cap a failed allocation or a peak that reached the cap); null "
                    "with status error",
    "failed_at": "wall time of the failure",
    "params": "trainable parameters of the model",
    "versions": "framework and library versions",
    "device_name": "the device, as the framework names it",
    "layout": "NCHW or NHWC",
    "images": "images this process trained in its timed window (all of its devices)",
    "calibration_step_s": "under min_time_s, the mean time of the warm-up's steps after its "
                          "first two, on which the window's steps are planned (for a window "
                          "timed again, the pace of the one before); null otherwise",
    "windows": "windows timed: 1, or under min_time_s up to 3, one more each time one fell "
               "short of it on some rank (the last one is reported)",
    "steps_planned": "the steps this rank's calibration asked for: the asked steps, and under "
                     "min_time_s the whole chunks more that last it (scaling.workers.loop."
                     "planned_steps)",
    "steps_timed": "steps in the timed window: the largest of the ranks' steps_planned, agreed "
                   "before the window",
    "window_collectives": "calls of the session's own collectives (barrier, agree_max) between "
                          "the two barriers of the window: 0, the window holds training steps "
                          "only",
    "chunks": "the window's chunks, {steps, seconds} each: the device is synchronized only "
              "between chunks",
    "window_s": "the window on this rank's own monotonic clock, from the start barrier to the "
                "end barrier",
    "start": "wall time at the window's start (for reading logs; never compared across hosts)",
    "end": "wall time at the window's end",
    "marks": "wall times at the edges of the rank's phases (first_step, then the end of each "
             "reference that ran), from which the record's wall_breakdown is made",
    "step_time_median_s": "median step time",
    "step_time_p95_s": "95th percentile step time",
    "peak_memory_bytes": "peak device memory (CUDA allocated), or peak RSS on CPU",
    "capped_memory_peak_bytes": "peak of the quantity that out-of-memory is decided on (also "
                                "in a failure's report under the heap cap)",
    "memory_capacity_bytes": "how much of that quantity the rank could have",
    "host": "host name of the reporting process",
    "process_started": "wall time at which the process's worker started (after the "
                       "interpreter and the worker's own imports): before its cell where it runs "
                       "in a shared process tree (an earlier cell's, or the sweep's trees "
                       "started together)",
    "node": "its node, by the name the backend gives it (SLURMD_NODENAME under Slurm, or "
            "SCALING_NODE_NAME where a backend sets it), else its host name",
    "collective_env": "the collectives' and launchers' environment as this process saw it "
                      "(scaling.workers.collective_env; a launcher may add its own, such as "
                      "horovodrun's NCCL_SOCKET_IFNAME)",
    "world_size": "processes in the cell (launchers that set WORLD_SIZE)",
    "communication_in_effect": "the launcher's communication knobs as the worker read them back "
                               "from the framework (knob -> value in effect), where it has any",
    "amp_dtype": "the autocast dtype under mixed precision, or null",
    "compile_s": "seconds that compilation took, before the warm-up",
    "step_breakdown": "with profile: {compute, communication, idle}, fractions of the profiled "
                      "steps, and communication_beside where the trace shows the collectives "
                      "(scaling.workers.breakdown)",
    "trace": "with profile: this rank's Chrome trace, cells/CELL/trace-rank{N}.json",
    "profile_error": "with profile: why there is no breakdown",
    "data_sums": "one per replica the process drives: the sum of its input images (each "
                 "replica's batch is seeded by its index in the cell)",
    "gradient_sums": "with a backward pass, one per replica: the sum of every element of its "
                     "gradients after the last step (aggregated in forward_backward, so equal "
                     "on every replica); in train only where the optimizer leaves them (torch, "
                     "MXNet), not for TensorFlow or JAX",
    "flops_per_image": "FLOPs of one image in the cell's mode, counted by the framework "
                       "(multiply-add = 2), before the warm-up",
    "gradient_bytes": "bytes of the gradients the process aggregates per step and replica "
                      "(null in forward mode)",
    "precision": "fp32, bf16 or fp16: the precision of the cell's compute",
    "matmul_probe_tflops": "TFLOP/s of the best square matrix product on one device at the "
                           "cell's threads, over at least 0.25 s of products, before the "
                           "warm-up, while the cell's other ranks probe too",
    "gradient_allreduce": "after the window of a data-parallel sweep cell over more than one "
                          "device with a backward pass: the allreduce of gradient_bytes through "
                          "the cell's own collective, {bytes, iterations_per_chunk, "
                          "chunk_seconds, devices}",
    "local_step_s": "after the window of a sweep cell with a backward pass: the mean of steps "
                    "forward and backward passes with nothing aggregated, run on every rank at "
                    "once (scaling.workers.loop.contended_compute)",
    "local_step_chunks": "the mean local step of each chunk of those passes (about ten chunks), "
                         "for local_step_s's interval",
    "communicating_step_chunks": "in a data-parallel cell over two or more devices: the same, "
                                 "each pass with an allreduce of the gradient bytes through the "
                                 "cell's collective in flight beside it, in a second thread",
    "allreduce": "purpose allreduce: per size, {bytes, iterations_per_chunk, chunk_seconds}",
    "loader_window": "with data: {window_s, images} of the input pipeline alone, after the "
                     "window (scaling.workers.loop.input_references)",
    "synthetic_window": "with data: {window_s, images} of the same steps on a synthetic batch",
    "allreduce_devices": "purpose allreduce: the devices the sum runs over, in the whole cell",
}
"""Fields of ``cells/CELL/rank{N}.json``; frameworks may add their own details."""

RECORD_FIELDS: Dict[str, str] = {
    "cell": "the cell's id: a hash of what is measured",
    "framework": "torch, tensorflow, mxnet or jax",
    "launcher": "how the ranks were started",
    "data_parallel": "the data-parallel mechanism the workers built: ddp, mirrored, "
                     "multiworker, kvstore or horovod",
    "workload": "the model",
    "device_type": "gpu or cpu",
    "devices": "devices per node",
    "nodes": "nodes",
    "total_devices": "devices x nodes",
    "batch_size": "per-device batch",
    "global_batch_size": "batch_size x total_devices",
    "image_size": "square input side",
    "steps": "timed steps asked for",
    "warmup": "untimed steps first (under min_time_s, at least 4 run)",
    "repeat": "repeat index",
    "purpose": "sweep, maxbatch for max-batch trials, confirmation for a run that confirms "
               "a max-batch answer as a plain cell (its steps and warm-up), allreduce for "
               "the collective benchmark (scaling allreduce), or preflight for scaling "
               "preflight's short single cell (kept in OUT/cells only, never in the results), or "
               "tune for a trial of scaling tune (images/sec only: no allreduce or contended "
               "compute after its window)",
    "sizes": "purpose allreduce: the message sizes timed, bytes; empty otherwise",
    "threads_per_device": "CPU threads per device",
    "threads_default": "whether threads_per_device is the default: the cores of a node over "
                       "the largest device count of the run or sweep",
    "memory_limit": "per-device memory cap on CPU, bytes",
    "options": "framework options",
    "timeout_s": "seconds before the process tree is killed",
    "min_time_s": "seconds the timed window is planned to last at least, by whole chunks at "
                  "the warm-up's step time",
    "profile": "whether a few steps ran under the profiler after the window",
    "variant": "the sweep's name for this environment of the framework (tensorflow@tf215), or "
               "empty",
    "mode": "train, forward (inference) or forward_backward (no optimizer step)",
    "data": "the absolute path of the ImageFolder tree of real JPEGs the cell trained on, or "
            "empty for synthetic data (one batch on the device)",
    "references": "whether the cell timed the references after its window (the scaling "
                  "model's local steps and allreduce, the input verdict's figures): a sweep's "
                  "references setting decides it per repeat (scaling.sweep.REFERENCES)",
    "loader_workers": "loader worker processes decoding real images (tf.data: threads); 0: "
                      "the training process",
    "collective_env": "the environment that tunes the collectives and launchers (NCCL_*, "
                      "HOROVOD_*, GLOO_*, MXNET_*, XLA_FLAGS, TensorFlow's TF_* settings; "
                      "scaling.workers.collective_env.PREFIXES), captured when the cell was made, "
                      "with the variables that launcher options set (horovod's "
                      "fusion_threshold_mb, cycle_time_ms) over them, part of its identity; the "
                      "workers ran with exactly these",
    "loader_images_per_sec": "with data: images/sec out of the input pipeline alone, same "
                             "workers and shards, no model, all ranks together",
    "synthetic_images_per_sec": "with data: images/sec of the same cell on a synthetic "
                                "batch, timed in the same processes after its window",
    "status": "one of " + ", ".join(STATUSES),
    "error": "one-line reason when not ok",
    "oom_evidence": "why the status is oom: 'framework error: ...' (the framework's own "
                    "out-of-memory error) or, under the heap cap, a failed allocation or a peak "
                    "that reached the cap ('peak 1.99 GiB reached the 2 GiB cap'); null "
                    "otherwise",
    "params": "trainable parameters",
    "images_per_sec": "global images over the longest rank window",
    "images_per_sec_ci95": "[low, high]: 95% interval of images_per_sec from the chunk times",
    "timed_images": "global images over the timed window",
    "timed_window_s": "the longest rank window, seconds",
    "steps_planned": "the largest of the ranks' planned steps (their rank reports'), agreed "
                     "before the window",
    "steps_timed": "steps each rank timed",
    "step_breakdown": "with profile: {compute, communication, idle} fractions of a step, and "
                      "communication_beside where the trace shows the collectives, the mean "
                      "over the ranks that have each",
    "step_time_median_s": "median over ranks of their median step time",
    "step_time_p95_s": "largest 95th percentile step time of any rank",
    "peak_memory_bytes": "largest peak memory of any rank",
    "peak_memory_bytes_per_rank": "each rank's peak memory",
    "capped_memory_peak_bytes": "largest peak of the capped quantity",
    "memory_capacity_bytes": "smallest capacity of any rank",
    "noisy": "whether other processes were busy before or during the window (or ran on the "
             "cell's GPUs, or, under Slurm, other jobs ran on its nodes)",
    "noise": "how busy, e.g. 'other processes used 0.90 cores of 2 during the window', or null",
    "noise_cores": "cores other processes used during the window, on average",
    "quiet_wait_s": "seconds waited for quiet before the cell (--wait-for-quiet), or null",
    "rank_step_s": "each rank's median step time, by rank",
    "rank_local_step_s": "each rank's mean local step (its forward and backward passes with "
                         "nothing aggregated, all ranks at once), by rank; null where a rank "
                         "did not time one",
    "straggler_rank": "the slowest rank: by rank_local_step_s where timed, rank_step_s "
                      "otherwise (null with one rank)",
    "straggler_host": "the node of straggler_rank: the rank report's node (the Slurm node "
                      "under --backend slurm), else its host",
    "rank_skew": "the slowest rank's figure over the ranks' median (null with one rank)",
    "straggler": "why the cell is a straggler (rank_skew of 1.2 or more: "
                 "scaling.execute.aggregate.STRAGGLER_SKEW), e.g. 'rank 1 on node2 took 1.31x "
                 "the ranks' median local step (0.412 s)', or 'rank 1 on n2 (host vm) took...' "
                 "where the node's name is not its host's; null otherwise",
    "telemetry": "window summary: cpu_util_mean (percent of all cores), rss_max_bytes_per_rank, "
                 "and on GPUs gpu_util_mean, gpu_memory_max_bytes, power_mean_w, energy_j "
                 "(from the devices' cumulative energy counters where NVML gives them, else "
                 "mean power x window, as energy_source says), temperature_max_c, "
                 "sm_clock_mean_mhz (what the device gives); the series is "
                 "cells/CELL/telemetry.jsonl",
    "images_per_joule": "timed images over the GPUs' energy in the window (node 0's energy x "
                        "nodes); null without an energy reading",
    "flops_per_image": "FLOPs of one image in the cell's mode (multiply-add = 2; forward, or "
                       "forward and backward), counted on the framework's own graph (torch's "
                       "meta-device run, TensorFlow's traced step, JAX's jaxpr, MXNet's symbol "
                       "graph) by torch's FlopCounterMode rules",
    "gradient_bytes": "what one step's gradient aggregation communicates per replica: the "
                      "trainable parameters' gradients, bytes (null in forward mode)",
    "precision": "fp32, bf16 or fp16",
    "achieved_tflops": "flops_per_image x images_per_sec / 10^12",
    "achieved_tflops_per_device": "achieved_tflops / total_devices",
    "matmul_probe_tflops": "the slowest rank's probe of the matrix-product speed before its "
                           "warm-up, all ranks at once: a sentinel of the machine's speed, not "
                           "what mfu divides by",
    "matmul_ceiling_tflops": "the matrix-product ceiling of one device at the cell's threads "
                             "and precision: on CPU the median of the node's repeats, measured "
                             "alone before the cells (ceilings.jsonl; the mean over the nodes "
                             "of a multi-node cell); on GPU matmul_probe_tflops",
    "matmul_ceiling_tflops_ci95": "[low, high]: its 95% interval on CPU (order statistics of "
                                  "the median of the repeats)",
    "matmul_ceiling_source": "how and where matmul_ceiling_tflops was measured",
    "peak_tflops": "the peak of one device that mfu divides by: a GPU's dense peak for the "
                   "precision (fp32 on TF32 tensor cores where the GPU has them), or on CPU "
                   "matmul_ceiling_tflops",
    "peak_source": "where peak_tflops comes from",
    "mfu": "achieved_tflops_per_device / peak_tflops",
    "matmul_ceiling_fraction": "achieved_tflops_per_device / matmul_ceiling_tflops",
    "allreduce_time_s": "the median time of one allreduce of gradient_bytes over the cell's "
                        "devices, through its own collective, timed after the window (null "
                        "without a data-parallel backward pass over more than one device)",
    "allreduce_time_s_ci95": "[low, high]: its interval (order statistics of the median)",
    "allreduce_busbw_GBps": "the bus bandwidth of that allreduce, algbw x 2(n-1)/n",
    "local_step_s": "the median over ranks of one forward and backward pass with nothing "
                    "aggregated, all ranks at once, timed after the window: the compute of a "
                    "step at the cell's device count, contention included (null at one "
                    "device under a parallel launcher, and where the framework's worker does "
                    "not time it)",
    "local_step_s_ci95": "[low, high]: its 95% interval, from every rank's chunk means",
    "local_step_communicating_s": "the same passes with an allreduce of the gradient bytes in "
                                  "flight beside each (scaling.workers.loop.contended_compute): "
                                  "the compute with the launcher's communication running beside "
                                  "it; null where not timed",
    "local_step_communicating_s_ci95": "[low, high]: its 95% interval",
    "versions": "framework and library versions",
    "device_name": "the device, as the framework names it",
    "layout": "NCHW or NHWC",
    "hosts": "hosts the ranks ran on",
    "node_names": "the nodes the ranks ran on, by the names their backend gives them "
                  "(SCALING_NODE_NAME, Slurm's node name, a Ray node's id), else their host "
                  "names: what a history tells nodes apart by",
    "host": "host that ran the harness",
    "cpu_model": "its CPU",
    "cpu_cores": "its cores",
    "harness_version": "version of this harness",
    "started_at": "UTC start time",
    "fingerprint": "each node's fingerprint hash, by node rank: the node's versions, clocks, "
                   "topology, CPU, container and collective environment, in "
                   "OUT/fingerprints/HASH.json (scaling.execute.fingerprint); null where no "
                   "node started the cell",
    "slurm": "under --backend slurm: job_id, array_task_id, allocation (array: the cell's own "
             "array task; one: a step of the sweep's one allocation), step_id (the srun step "
             "that ran it), node_list (the nodes the cell ran on), job_node_list (the job's "
             "nodes: the whole allocation's under allocation one), nodes (each node's Slurm "
             "name, host, CPU and GPUs), restart_count, exclusive (whole nodes asked for; "
             "false under --shared) and other_jobs (other Slurm jobs seen running on its "
             "nodes, which also mark it noisy)",
    "ray": "under --backend ray: address (the cluster's head), placement_group (the id of the "
           "cell's group, one bundle per node) and nodes (each Ray node that ran a part: its "
           "node_id, address, host, CPU and GPUs, in node-rank order)",
    "wall_s": "seconds from launch to the end of the process tree",
    "wall_breakdown": "where the cell's wall time went, in seconds (scaling.execute.wall): "
                      "before_launch, start (until the first rank's worker runs), build (to its "
                      "first step), warmup (and calibration), "
                      "window, each reference that ran (input, profile, allreduce, "
                      "local_steps, communicating_steps), teardown, after, and their total",
    "log": "the launcher's log",
    "process_tree": "where the cell ran in a shared process tree (scaling.execute.trees): tree "
                    "(its id) and position (1 for the cell that started it); null for a cell "
                    "that started its own processes",
    "process_token": "token every process of the cell (or of its shared tree) carried",
}
"""Fields of a line of ``results.jsonl`` and of ``cells/CELL/record.json``."""


ALLREDUCE_FIELDS: Dict[str, str] = {
    "allreduce_devices": "the devices the allreduce sums over (n)",
    "allreduce": "one entry per size: bytes, time_s (the median time of one call over the "
                 "timed chunks, each chunk's mean taken on its slowest rank), time_s_ci95 "
                 "([low, high], order statistics of the median, at least 95%), iterations, "
                 "algbw_GBps (bytes / time_s / 10^9) and busbw_GBps (algbw x 2(n-1)/n, as "
                 "nccl-tests); allreduce.jsonl has one line per size with the cell's fields",
}
"""Fields that a record of purpose ``allreduce`` has in place of the training metrics."""

MAXBATCH_FIELDS: Dict[str, str] = {
    "framework": "framework", "launcher": "launcher", "workload": "workload",
    "devices": "devices per node searched",
    "max_batch": "the largest per-device batch that fitted its trials and passed every "
                 "confirmation; empty when none did or the search gave up",
    "min_oom_batch": "the smallest batch above it that ran out of memory, on evidence",
    "images_per_sec": "throughput of the answer's last confirmation (its last trial without one)",
    "peak_memory_bytes": "peak memory of that run",
    "trials": "runs of the search, trials and confirmations, each in its own process tree",
    "seconds": "their wall time, summed",
    "safe_batch": "with --headroom: max_batch times it, rounded down to --multiple-of",
    "status": "ok, or the status of the trial that stopped the search",
    "error": "why the search stopped: the batch, and the error of its last run",
    "failed_batch": "the batch whose trial failed other than by OOM twice, stopping the search",
    "confirmations": "confirmations of max_batch that passed: at least 2, more while their "
                     "capped peaks differ by as much as the room left under the cap (at most 4)",
    "rejected": "batches that fitted their trials but failed a confirmation, each with its "
                "status (unsettled: still no room for the peaks' spread after 4)",
}
"""Columns of ``maxbatch.csv`` (``scaling maxbatch``), one row per searched device count."""
