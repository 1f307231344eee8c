"""The harness's images/sec against a plain hand-written loop on the same configuration.

``--framework torch``: harness torchrun cell against ``plain_ddp.py`` (DDP under torchrun).
``--framework tensorflow``: harness tf-mirrored cell against ``plain_keras.py`` (Keras with
MirroredStrategy). ``--framework mxnet``: harness mxnet-kvstore cell against ``plain_gluon.py``
(Gluon over N CPU contexts, kvstore local), both under MXNet's interpreter. ``--framework
jax``: harness jax cell against ``plain_jax.py`` (one ``jax.jit`` step over a device mesh).
Runs the two alternately, ``--runs`` times each, and reports the median of
each and the ratio of medians (harness / plain). Target: ratio >= 0.97.

    python bench/overhead.py --framework torch --output bench/results/torch_overhead.json
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import harness_record, machine
from scaling import hardware
from scaling.frameworks import get_framework

HERE = Path(__file__).resolve().parent


PLAIN = {"torch": "torchrun", "tensorflow": "tf-mirrored", "mxnet": "mxnet-kvstore", "jax": "jax"}


def plain_run(args, threads: int, scratch: Path) -> float:
    out = scratch / "plain.json"
    shape = [str(args.batch_size), str(args.image_size), str(args.steps), str(args.warmup),
             str(threads), str(out)]
    if args.framework == "torch":
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc-per-node", str(args.devices), str(HERE / "plain_ddp.py"),
                args.workload, *shape]
    else:
        script, python = {
            "tensorflow": ("plain_keras.py", sys.executable),
            "jax": ("plain_jax.py", sys.executable),
            "mxnet": ("plain_gluon.py", get_framework("mxnet").default_python()),
        }[args.framework]
        argv = [python, str(HERE / script), args.workload, str(args.devices), *shape]
    subprocess.run(argv, check=True, capture_output=True, env={
        **os.environ, "PYTHONPATH": str(HERE.parent), "OMP_NUM_THREADS": str(threads),
        "TF_CPP_MIN_LOG_LEVEL": "1"})
    return json.loads(out.read_text())["images_per_sec"]


def harness_run(args, repeat: int, scratch: Path) -> float:
    return harness_record(scratch / "harness", framework=args.framework,
                          launcher=PLAIN[args.framework], workload=args.workload,
                          devices=args.devices, batch_size=args.batch_size,
                          image_size=args.image_size, steps=args.steps, warmup=args.warmup,
                          repeat=repeat)["images_per_sec"]


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--framework", choices=sorted(PLAIN), default="torch")
    parser.add_argument("--workload", default="cifar10")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    threads = max(1, hardware.cpu_cores() // args.devices)
    harness, plain = [], []
    with tempfile.TemporaryDirectory() as scratch:
        for repeat in range(args.runs):
            plain.append(plain_run(args, threads, Path(scratch)))
            harness.append(harness_run(args, repeat, Path(scratch)))
            print(f"run {repeat}: harness {harness[-1]:.1f} img/s, plain {plain[-1]:.1f} img/s",
                  flush=True)
    result = {
        "benchmark": f"{args.framework} harness ({PLAIN[args.framework]}) vs plain loop",
        "config": {**vars(args), "output": None, "threads_per_device": threads,
                   "device_type": "cpu"},
        "machine": machine(),
        "harness_images_per_sec": harness,
        "plain_images_per_sec": plain,
        "harness_median": statistics.median(harness),
        "plain_median": statistics.median(plain),
        "ratio_of_medians": statistics.median(harness) / statistics.median(plain),
    }
    print(f"median harness {result['harness_median']:.1f} img/s, plain "
          f"{result['plain_median']:.1f} img/s, ratio {result['ratio_of_medians']:.3f}")
    if args.output:
        args.output.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
