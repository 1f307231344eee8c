"""TensorFlow's profiler, turned into the Chrome trace that ``breakdown`` reads.

The profiler writes an XSpace (``*.xplane.pb``); its TensorFlow operations (host plane) and its
kernels (GPU planes) become complete events of a Chrome trace. Runtime and executor spans of the
host plane are left out: they are not operations.
"""

from __future__ import annotations

import glob
import json
import re
from typing import Callable, Dict, List

TF_OPERATION = re.compile(r"^[^\s:]+:[A-Za-z_]\w*$")
"""A TensorFlow operation in the profiler's host plane: ``scope/name:Type``."""


def plane_events(plane) -> List[Dict]:
    """The Chrome trace events of one XSpace plane: kernels on a GPU, operations on the host,
    none elsewhere."""
    on_gpu = plane.name.startswith("/device:GPU")
    if plane.name != "/host:CPU" and not on_gpu:
        return []
    names = {key: meta.name for key, meta in plane.event_metadata.items()}
    events = []
    for line in plane.lines:
        for event in line.events:
            name = names.get(event.metadata_id, "")
            if not on_gpu and not TF_OPERATION.match(name):
                continue
            events.append({
                "name": name, "ph": "X", "tid": line.id, "cat": "kernel" if on_gpu else "op",
                "ts": line.timestamp_ns / 1e3 + event.offset_ps / 1e6,
                "dur": event.duration_ps / 1e6})
    return events


def write_chrome_trace(logdir: str, path: str) -> None:
    """Convert the newest XSpace under ``logdir`` into the Chrome trace at ``path``."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    with open(sorted(glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True))[-1], "rb") as pb:
        space.ParseFromString(pb.read())
    events = [event for plane in space.planes for event in plane_events(plane)]
    with open(path, "w") as trace:
        json.dump({"traceEvents": events}, trace)


def profile(tf, run_steps: Callable[[], None], path: str) -> None:
    """Run ``run_steps`` under TensorFlow's profiler and write their Chrome trace to ``path``
    (the profiler's own files go to a folder beside it)."""
    logdir = path[:-len(".json")] + "-tf"
    tf.profiler.experimental.start(logdir)
    run_steps()
    tf.profiler.experimental.stop()
    write_chrome_trace(logdir, path)
