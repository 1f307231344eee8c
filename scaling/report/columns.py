"""The columns ``scaling report`` adds to each sweep record, and the columns of
``results.csv`` in order (the record's own fields are in ``scaling.schema``)."""

from __future__ import annotations

from typing import Dict

SCALING_FIELDS: Dict[str, str] = {
    "framework_version": "the framework's version; part of what makes a curve",
    "references_from": "the cell whose references (local steps, allreduce, the input's "
                       "figures) the row's scaling model and input verdict read: its own, or "
                       "its point's first repeat that timed them (scaling.report.references); "
                       "empty where none did",
    "baseline_images_per_sec": "median images/sec of the curve's baseline: its single cell, "
                               "or its own one-device point where no single cell is ok",
    "baseline_launcher": "single, or the curve's own launcher when single did not run or "
                         "failed",
    "baseline_reason": "why the curve is not measured against single, or empty",
    "parallel_overhead": "1 - (the launcher at one device / single): what going parallel costs "
                         "at one device",
    "baseline_local_step_s": "local_step_s of the curve's single cell: its forward and "
                             "backward pass alone on the host",
    "baseline_drift": "(largest - smallest) / median of the baseline's measurements, run "
                      "before each round of its curve's cells and after the last: how far the "
                      "machine's speed moved while the curve ran (empty for one measurement)",
    "baseline_measurements": "how many ok measurements the baseline's figure is the median of",
    "baseline_gap_s": "seconds between the cell's start and the nearest start of its "
                      "baseline's measurements (empty for a measurement of the baseline itself)",
    "baseline_hosts": "the hosts the baseline's measurements ran on",
    "drifted": "why the point is drifted: its baseline moved more than the point's own interval "
               "is wide, or empty",
    "parallel_overhead_low": "lower bound of parallel_overhead's interval",
    "parallel_overhead_high": "upper bound of parallel_overhead's interval",
    "speedup": "images_per_sec / baseline_images_per_sec",
    "efficiency": "speedup / total_devices",
    "images_per_sec_low": "lower bound of the 95% interval of the record's images/sec, from "
                          "its chunk times",
    "images_per_sec_high": "upper bound of that interval",
    "speedup_low": "lower bound of the speedup's interval (its two figures' intervals "
                   "combined)",
    "speedup_high": "upper bound of the speedup's interval",
    "efficiency_low": "speedup_low / total_devices",
    "efficiency_high": "speedup_high / total_devices",
    "suspect": "why the figure is suspect (efficiency over 105%, or an interval wider than 10% "
               "of the figure), or empty",
    "price_per_hour": "US dollars per hour of the cell's devices or nodes, from the prices "
                      "given (empty without one)",
    "cost_per_million_images": "price_per_hour x 10^6 / (images/sec x 3600)",
    "time_to_million_images_s": "10^6 / images/sec",
    "cost_relative": "cost per million images over that of the workload's reference cell (its "
                     "fastest GPU cell, or its fastest cell without GPUs)",
    "time_relative": "time to a million images over the reference cell's",
    "model_input": "for a 1-device row, what it gives the scaling model (not a prediction): "
                   "the compute (the baseline) or the launcher (its own cost at one device); "
                   "empty otherwise",
    "predicted_images_per_sec": "the scaling model's images/sec: the global batch over the "
                                "single step, plus launcher_s, contention_s, interference_s and "
                                "the allreduce not hidden (scaling.report.model), the middle of "
                                "its band; empty at one device",
    "model_tells": "whether the prediction's band is within 25% of it on both sides; where "
                   "it is not, the model cannot tell at this size whether the measurement "
                   "meets it (the table says so beside the ratio)",
    "predicted_images_per_sec_low": "the band's low end: no overlap of the allreduce (or the "
                                    "profiled exposure), at the high ends of every term's "
                                    "interval",
    "predicted_images_per_sec_high": "the band's high end: full overlap with the backward pass, "
                                     "at the low ends of the terms' intervals; empty where one "
                                     "is open on that side",
    "prediction_ratio": "images_per_sec / predicted_images_per_sec (empty at one device)",
    "loss_term": "the largest part of the step beyond the single step's compute: the launcher, "
                 "contention, communication beside compute, exposed communication or the rest; "
                 "empty at or above linear",
    "loss_term_share": "loss_term's seconds over the measured step's",
    "launcher_s": "the launcher's own cost at one device: its own 1-device step less the single "
                  "step, both measured (from parallel_overhead); empty without a single "
                  "baseline",
    "launcher_s_low": "lower end of launcher_s's interval (from parallel_overhead's)",
    "launcher_s_high": "upper end of launcher_s's interval",
    "contention_s": "local_step_s - baseline_local_step_s: how much longer a step's compute "
                    "takes with every device of the cell busy than alone; negative where it "
                    "was faster, never clamped; empty where either was not timed",
    "contention_s_low": "lower end of contention_s's interval (the two local steps' intervals, "
                        "opposite ends)",
    "contention_s_high": "upper end of contention_s's interval",
    "interference_s": "(local_step_communicating_s - local_step_s) x beside_share: how much "
                      "longer the compute takes with an allreduce of the gradient bytes in "
                      "flight beside it, for the share of the communication that runs there",
    "interference_s_low": "lower end of interference_s's interval",
    "interference_s_high": "upper end of interference_s's interval",
    "beside_share": "the share of the cell's communication that runs beside its compute: the "
                    "profile's communication_beside over it plus the exposed communication; 1 "
                    "where the trace cannot see the collectives or the cell was not profiled",
    "prediction_error": "on the largest point of a curve with two or more multi-device points "
                        "(any node count): measured / predicted - 1, the prediction from the "
                        "curve's other points alone (scaling.report.extrapolation.leave_one_out)",
    "prediction_error_low": "lower end of its interval (the measured figure's and the "
                            "prediction's band, combined)",
    "prediction_error_high": "upper end of its interval",
    "prediction_error_from": "the points it was predicted from (their device counts)",
    "input_bound": "with data: whether the input is the bound (real-data images/sec below "
                   "95% of synthetic, and the pipeline alone not clearly, 1.5x, faster than the "
                   "real-data cell); empty on synthetic data (scaling.report.input)",
    "loader_workers_needed": "with data, when input_bound: an estimate of the loader workers "
                             "that would feed the synthetic rate, from the per-worker "
                             "pipeline rate",
}
"""Columns that ``scaling report`` adds to each sweep record."""

CSV_COLUMNS = [
    "cell", "framework", "launcher", "workload", "mode", "device_type", "devices", "nodes",
    "total_devices", "batch_size", "global_batch_size", "image_size", "repeat", "status",
    "images_per_sec", *SCALING_FIELDS, "data", "loader_workers", "loader_images_per_sec",
    "synthetic_images_per_sec", "step_time_median_s", "step_time_p95_s",
    "allreduce_time_s", "allreduce_busbw_GBps", "local_step_s",
    "local_step_communicating_s", "images_per_joule",
    "peak_memory_bytes", "params", "flops_per_image", "gradient_bytes", "precision",
    "achieved_tflops", "achieved_tflops_per_device", "peak_tflops", "mfu",
    "matmul_ceiling_tflops", "matmul_ceiling_fraction", "peak_source", "matmul_probe_tflops",
    "noisy", "noise", "noise_cores", "straggler", "rank_skew", "telemetry", "step_breakdown",
    "error", "steps", "warmup", "threads_per_device", "threads_default", "memory_limit",
    "options", "device_name",
    "collective_env", "versions", "host", "hosts", "harness_version", "started_at",
]
"""Columns of ``results.csv``, in order."""
