"""The harness's JAX ResNet-50 (Flax NNX, ``workloads.flax_models``) beside the linen ResNet-50
of Flax's own ImageNet example (google/flax ``examples/imagenet/models.py``, written out below
as the reference): the same jitted SGD training step on one CPU device (forward, softmax
cross-entropy, backward, optax SGD with momentum, BatchNorm statistics updated), the state
donated as the harness's step donates it.

Each pair times the two models alternately, the order reversed in every other pair, each over
a window of ``--steps`` steps after ``--warmup`` (both compiled and warmed before the first
pair; Python's garbage collector is run between windows, not in them), by the wall clock and
by the process's CPU time. On a shared machine the CPU time is the steadier figure: while
another process has the core, the wall clock runs on and the CPU time does not. The results
give, for each clock, each pair's images/sec and ratio harness / example and the median ratio
with its interval (the order statistics that cover the median with 95% from 6 pairs on, else
the t interval of the mean); both models' parameter counts and FLOPs per image (the
harness's torch-rule counter, ``scaling.workers.jax.flops``, and XLA's cost analysis of the
compiled step); the instructions of one compiled step that the other's lacks; and with
``--profile``, each step's milliseconds by opcode and its five longest operations
(``jax.profiler``).

    python bench/jax_vs_flax.py --pairs 12 --profile --label after \
        --output bench/results/jax_vs_flax.json

``--label`` names the run inside the results file, which keeps the runs of other labels.
"""

import argparse
import functools
import gc
import json
import os
import statistics
import tempfile
import time
from pathlib import Path


def pin(threads: int) -> None:
    """One CPU device of ``threads`` cores: this process pinned to the first ``threads`` of its
    cores (as the harness's workers pin theirs), before XLA starts its thread pool."""
    allowed = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, allowed[:threads])


def linen_resnet50(classes: int):
    """The ResNet-50 of Flax's ImageNet example: its ResNet with BottleneckResNetBlock, stage
    sizes 3, 4, 6, 3, float32. Convolutions have Flax's default padding, SAME, except the
    stem's explicit (3, 3); the max pool pads SAME; the last BatchNorm of each block starts
    with a zero scale."""
    import jax.numpy as jnp
    from flax import linen as nn

    class BottleneckResNetBlock(nn.Module):
        filters: int
        conv: object
        norm: object
        strides: tuple = (1, 1)

        @nn.compact
        def __call__(self, x):
            residual = x
            y = nn.relu(self.norm()(self.conv(self.filters, (1, 1))(x)))
            y = nn.relu(self.norm()(self.conv(self.filters, (3, 3), self.strides)(y)))
            y = self.conv(self.filters * 4, (1, 1))(y)
            y = self.norm(scale_init=nn.initializers.zeros_init())(y)
            if residual.shape != y.shape:
                residual = self.conv(self.filters * 4, (1, 1), self.strides,
                                     name="conv_proj")(residual)
                residual = self.norm(name="norm_proj")(residual)
            return nn.relu(residual + y)

    class ResNet(nn.Module):
        num_classes: int
        stage_sizes: tuple = (3, 4, 6, 3)
        num_filters: int = 64

        @nn.compact
        def __call__(self, x, train: bool = True):
            conv = functools.partial(nn.Conv, use_bias=False, dtype=jnp.float32)
            norm = functools.partial(nn.BatchNorm, use_running_average=not train,
                                     momentum=0.9, epsilon=1e-5, dtype=jnp.float32)
            x = conv(self.num_filters, (7, 7), (2, 2), padding=[(3, 3), (3, 3)],
                     name="conv_init")(x)
            x = nn.relu(norm(name="bn_init")(x))
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
            for i, block_size in enumerate(self.stage_sizes):
                for j in range(block_size):
                    strides = (2, 2) if i > 0 and j == 0 else (1, 1)
                    x = BottleneckResNetBlock(self.num_filters * 2 ** i, conv=conv, norm=norm,
                                              strides=strides)(x)
            x = jnp.mean(x, axis=(1, 2))
            return jnp.asarray(nn.Dense(self.num_classes, dtype=jnp.float32)(x), jnp.float32)

    return ResNet(num_classes=classes)


class Side:
    """One model's jitted training step, its state, and its figures."""

    def __init__(self, name, step, state, params, flops, batch):
        import jax

        self.name, self.step, self.state, self.batch = name, step, state, batch
        self.parameters = sum(leaf.size for leaf in jax.tree.leaves(params))
        self.flops = flops

    def run(self, steps: int) -> tuple:
        """images/sec over ``steps`` steps, the state carried on: by the wall clock and by this
        process's CPU time (every thread of XLA's pool included). Python's garbage collector
        runs before the window and not in it: a full collection (tens of milliseconds here)
        would land in whichever window crossed its threshold, not in the model's step."""
        import jax

        images, labels = self.batch
        jax.block_until_ready(self.state)
        gc.collect()
        gc.disable()
        try:
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(steps):
                self.state = self.step(*self.state, images, labels)
            jax.block_until_ready(self.state)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        finally:
            gc.enable()
        return images.shape[0] * steps / wall, images.shape[0] * steps / cpu


def harness_side(size: int, batch, tx) -> Side:
    """``workloads.flax_models.resnet50`` in the harness's training step
    (``scaling.workers.jax.step.JaxStep.train`` on one device)."""
    import jax
    import optax
    from flax import nnx

    from scaling.workers.jax.flops import flops_per_image
    from workloads import flax_models

    model = flax_models.resnet50(size, 1000)
    model.train()
    graph, params, stats, rest = nnx.split(model, nnx.Param, nnx.BatchStat, ...)

    def loss(params, stats, rest, images, labels):
        model = nnx.merge(graph, params, stats, rest, copy=True)
        logits = model(images)
        _, _, stats, rest = nnx.split(model, nnx.Param, nnx.BatchStat, ...)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean(), (stats,
                                                                                         rest)

    def train(params, stats, rest, opt_state, images, labels):
        (_, (stats, rest)), grads = jax.value_and_grad(loss, has_aux=True)(
            params, stats, rest, images, labels)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), stats, rest, opt_state

    shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), (params, stats, rest))
    flops = flops_per_image(jax, nnx, graph, shapes, (size, size, 3), "train")
    state = (params, stats, rest, jax.jit(tx.init)(params))
    return Side("harness", compile_step(train, state, batch), state, params, flops, batch)


def example_side(size: int, batch, tx) -> Side:
    """The Flax example's linen ResNet-50 in the same step: ``apply`` with ``train=True`` and
    the ``batch_stats`` collection mutable, as the example's ``train_step`` does."""
    import jax
    import optax

    from scaling.workers.jax.flops import jaxpr_flops

    model = linen_resnet50(1000)
    variables = jax.jit(lambda: model.init(jax.random.key(0), batch[0], train=False))()
    params, stats = variables["params"], variables["batch_stats"]

    def loss(params, stats, images, labels):
        logits, updates = model.apply({"params": params, "batch_stats": stats}, images,
                                      train=True, mutable=["batch_stats"])
        return (optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean(),
                updates["batch_stats"])

    def train(params, stats, opt_state, images, labels):
        (_, stats), grads = jax.value_and_grad(loss, has_aux=True)(params, stats, images, labels)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), stats, opt_state

    def forward(params, stats, images):
        return model.apply({"params": params, "batch_stats": stats}, images, train=True,
                           mutable=["batch_stats"])[0]

    images = jax.ShapeDtypeStruct((2, size, size, 3), jax.numpy.float32)
    closed = jax.make_jaxpr(forward)(params, stats, images)
    trained = len(jax.tree.leaves(params))
    flops, _ = jaxpr_flops(closed.jaxpr, [True] * trained
                           + [False] * (len(closed.jaxpr.invars) - trained), backward=True)
    state = (params, stats, jax.jit(tx.init)(params))
    return Side("example", compile_step(train, state, batch), state, params, flops / 2, batch)


def compile_step(train, state, batch):
    """The step jitted with the state donated, as the harness's is, and compiled ahead."""
    import jax

    return jax.jit(train, donate_argnums=tuple(range(len(state)))).lower(
        *state, *batch).compile()


def xla_flops(side: Side) -> float:
    """XLA's cost analysis of the whole compiled step (forward, backward and update), per
    image; it leaves out the padded positions that torch's rule counts."""
    analysis = side.step.cost_analysis()
    analysis = analysis[0] if isinstance(analysis, list) else analysis
    return analysis["flops"] / side.batch[0].shape[0]


def profile(side: Side, steps: int, logdir: str) -> dict:
    """``steps`` steps under ``jax.profiler``: the milliseconds a step spends in each opcode,
    and the five operations that take longest, each with its instruction."""
    import collections
    import glob
    import gzip
    import re

    import jax

    from scaling.workers.jax.profile import opcodes

    with jax.profiler.trace(logdir, create_perfetto_trace=True):
        side.run(steps)
    with gzip.open(sorted(glob.glob(f"{logdir}/**/perfetto_trace.json.gz",
                                    recursive=True))[-1]) as raw:
        events = json.load(raw)["traceEvents"]
    text = side.step.as_text()
    ops, per_op = opcodes(text), collections.Counter()
    for event in events:
        op = (event.get("args") or {}).get("hlo_op")
        if event.get("ph") == "X" and op is not None and event["name"] == op:
            per_op[op] += event["dur"] / 1000 / steps
    by_opcode = collections.Counter()
    for op, ms in per_op.items():
        by_opcode[ops.get(op, "?")] += ms

    def instruction(op):
        line = re.search(rf"%{re.escape(op)} = ([^\n]*)", text).group(1)
        return re.sub(r", metadata=\{[^}]*\}", "", line)[:200]

    return {"ms_per_step_by_opcode": {k: round(v, 2) for k, v in by_opcode.most_common()},
            "ms_per_step_in_operations": round(sum(per_op.values()), 1),
            "longest": [{"ms_per_step": round(ms, 2), "instruction": instruction(op)}
                        for op, ms in per_op.most_common(5)]}


def measure(size: int, batch_size: int, pairs: int, steps: int, warmup: int,
            profile_dir: str = None) -> dict:
    import jax
    import numpy as np
    import optax

    from benchlib import alternating

    rng = np.random.default_rng(0)
    batch = (jax.device_put(rng.standard_normal((batch_size, size, size, 3), np.float32)),
             jax.device_put(rng.integers(0, 1000, batch_size).astype(np.int32)))
    tx = optax.sgd(0.01, momentum=0.9)
    sides = {}
    for build in (harness_side, example_side):
        started = time.perf_counter()
        side = build(size, batch, tx)
        side.run(warmup)
        print(f"{side.name}: built, compiled and warmed in {time.perf_counter() - started:.1f} s,"
              f" {side.parameters:,} parameters", flush=True)
        sides[side.name] = side
    names = tuple(sides)

    wall = {name: [] for name in names}

    def one(name, repeat):
        sides[name].run(warmup)
        per_wall, per_cpu = sides[name].run(steps)
        wall[name].append(per_wall)
        return per_cpu

    cpu = alternating(pairs, names, one, f"{size}px b{batch_size} (images per CPU-second)")
    profiles = {name: profile(sides[name], steps, f"{profile_dir}/{size}-{name}")
                for name in names} if profile_dir else None
    return {
        "image_size": size, "batch_size": batch_size, "pairs": pairs, "steps": steps,
        "warmup": warmup,
        "cpu_time": summary(cpu, names),
        "wall_clock": summary(wall, names),
        "parameters": {name: sides[name].parameters for name in names},
        "flops_per_image_train": {name: sides[name].flops for name in names},
        "xla_flops_per_image_step": {name: xla_flops(sides[name]) for name in names},
        "program_differences": program_differences(sides["harness"].step,
                                                   sides["example"].step),
        **({"profile": profiles} if profiles else {}),
    }


def program_differences(harness, example) -> dict:
    """The instructions of one compiled step that the other lacks, as multisets of lines with
    names, operands, metadata and the order of parameters taken out (fused computations
    included): what XLA runs differently for the two models."""
    import collections
    import re

    def lines(compiled):
        kept = collections.Counter()
        for line in compiled.as_text().splitlines():
            line = line.strip()
            if not re.match(r"(ROOT )?%[\w.-]+ = ", line) or re.search(
                    r" (parameter|tuple|get-tuple-element)\(", line):
                continue
            line = re.sub(r", metadata=\{[^}]*\}", "", line.split(" = ", 1)[1])
            kept[re.sub(r"%[\w.-]+", "%", line)] += 1
        return kept

    ours, theirs = lines(harness), lines(example)
    return {"harness_only": sorted((ours - theirs).elements()),
            "example_only": sorted((theirs - ours).elements())}


def summary(figures: dict, names) -> dict:
    """Each pair's images/sec and ratio harness / example; the median ratio with its interval:
    the order statistics that cover the median with 95% from 6 pairs on, the t interval of the
    mean ratio below that."""
    from scaling.uncertainty import median_interval, repeats_interval

    ratios = [h / e for h, e in zip(figures["harness"], figures["example"])]
    interval = median_interval(ratios)
    return {"images_per_sec": {name: figures[name] for name in names},
            "median_images_per_sec": {name: statistics.median(figures[name]) for name in names},
            "ratios": ratios, "median_ratio": statistics.median(ratios),
            "ratio_ci95": list(interval) if interval else repeats_interval(ratios),
            "ratio_ci95_kind": ("order statistics of the median" if interval
                                else "t interval of the mean")}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=12)
    parser.add_argument("--steps", type=int, default=2, help="timed steps of each window")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps before each window")
    parser.add_argument("--shapes", default="64x8,32x16",
                        help="image size x batch size, comma separated")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--profile", action="store_true",
                        help="after the pairs, profile each side's step (jax.profiler)")
    parser.add_argument("--label", default="after")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    from benchlib import machine

    host = machine()  # before the pinning, which hides the other cores
    pin(args.threads)
    import flax
    import jax

    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for shape in args.shapes.split(","):
            size, batch_size = map(int, shape.split("x"))
            results.append(measure(size, batch_size, args.pairs, args.steps, args.warmup,
                                   scratch if args.profile else None))
            for clock in ("cpu_time", "wall_clock"):
                print(clock, json.dumps({k: results[-1][clock][k] for k in (
                    "median_ratio", "ratio_ci95", "ratios")}), flush=True)
    if args.output:
        previous = json.loads(args.output.read_text()) if args.output.exists() else {}
        runs = previous.get("runs", {})
        runs[args.label] = {
            "config": {"pairs": args.pairs, "steps": args.steps, "warmup": args.warmup,
                       "threads": args.threads, "device_type": "cpu", "jax": jax.__version__,
                       "flax": flax.__version__},
            "results": results}
        args.output.write_text(json.dumps({
            "benchmark": "the harness's JAX ResNet-50 beside the Flax ImageNet example's, "
                         "the same jitted training step",
            "machine": host, "runs": runs, **{k: v for k, v in previous.items()
                                                   if k not in ("benchmark", "machine", "runs")}},
            indent=2) + "\n")


if __name__ == "__main__":
    main()
