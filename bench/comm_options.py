"""Which communication knobs move throughput here: one knob at a time from the default.

Per launcher, each workload runs its default cell and one cell per knob turned away from its
default (``KNOBS``), on 2 CPU devices of 1 thread. The cells of one run go in one order, the next
run in the reverse order, so drift in the machine's load hits every variant alike. Reports per
variant the median images/sec over the runs with its interval, and the ratio to the default
measured in the same run (median over the runs, with the t interval of the per-run ratios): a
knob moved throughput here where that interval excludes 1.

    python bench/comm_options.py --launcher torchrun --runs 3 \\
        --output bench/results/comm_options_torchrun.json
"""

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from benchlib import alternating, harness_record, machine
from scaling.launchers import default_python
from scaling.uncertainty import repeats_interval

WORKLOADS = {
    # AlexNet's 244 MB of gradients dominate its step; ResNet-50's 100 MB in many small layers.
    "alexnet": {"image_size": 224, "batch_size": 4},
    "resnet50": {"image_size": 64, "batch_size": 8},
}
KNOBS = {
    "torchrun": ("torch", [{"bucket_cap_mb": 100}, {"bucket_cap_mb": 5},
                           {"gradient_as_bucket_view": True}, {"static_graph": True},
                           {"broadcast_buffers": False}, {"comm_hook": "fp16"}]),
    "horovod": ("torch", [{"fusion_threshold_mb": 0}, {"fusion_threshold_mb": 16},
                          {"cycle_time_ms": 10}, {"compression": "fp16"}]),
    "tf-mirrored": ("tensorflow", [{"cross_device_ops": "hierarchical_copy"}]),
    "tf-multiworker": ("tensorflow", [{"pack_mb": 16}, {"pack_mb": 64}]),
    "mxnet-kvstore": ("mxnet", [{"bigarray_bound": 100000}, {"bigarray_bound": 100000000}]),
}
SHAPE = {"devices": 2, "threads_per_device": 1, "steps": 8, "warmup": 2}


def label(knob: dict) -> str:
    return ", ".join(f"{key}={value}" for key, value in knob.items()) or "default"


def summary(workload: str, variant: str, values, ratios) -> dict:
    return {"workload": workload, "variant": variant,
            "images_per_sec_median": statistics.median(values),
            "images_per_sec_ci95": repeats_interval(values), "images_per_sec": values,
            "ratio_to_default_median": statistics.median(ratios),
            "ratio_to_default_ci95": repeats_interval(ratios), "ratios": ratios}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--launcher", choices=sorted(KNOBS), default="torchrun")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    framework, knobs = KNOBS[args.launcher]
    variants = [label(knob) for knob in [{}, *knobs]]
    options = dict(zip(variants, [{}, *knobs]))
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for workload in args.workloads.split(","):
            def measure(variant, repeat):
                return harness_record(
                    Path(scratch) / f"{workload}-{len(results)}-{repeat}", framework=framework,
                    launcher=args.launcher, workload=workload, repeat=repeat,
                    options=options[variant], python=default_python(framework, args.launcher),
                    **WORKLOADS[workload], **SHAPE)["images_per_sec"]

            figures = alternating(args.runs, variants, measure, workload)
            default = figures["default"]
            for variant in variants:
                ratios = [value / base for value, base in zip(figures[variant], default)]
                results.append(summary(workload, variant, figures[variant], ratios))
                line = results[-1]
                interval = line["ratio_to_default_ci95"] or [float("nan")] * 2
                print(f"{workload} {variant}: {line['images_per_sec_median']:.2f} img/s, "
                      f"{line['ratio_to_default_median']:.3f} of the default "
                      f"[{interval[0]:.3f}, {interval[1]:.3f}]", flush=True)
    if args.output:
        args.output.write_text(json.dumps({
            "benchmark": "communication knobs, one at a time from the default",
            "config": {"launcher": args.launcher, "framework": framework, **SHAPE,
                       "workloads": {name: WORKLOADS[name] for name in args.workloads.split(",")},
                       "runs": args.runs, "device_type": "cpu"},
            "machine": machine(), "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
