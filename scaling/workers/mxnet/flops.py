"""FLOPs of one image of a Gluon network, counted on its symbol graph by the rules of torch's
``FlopCounterMode`` (multiply-add = 2), from shapes alone (MXNet has no counter of its own).

Convolutions and fully connected layers count 2 x the output's elements x the weight's
elements per output feature (its window and input features), padded positions included. In a
backward mode each is counted again for each operand that needs a gradient: its weight, when
trained, and its input, when it follows from a trained parameter (never the images), as torch
counts a convolution's or a matrix product's backward. Standard library at import; MXNet is
passed in.
"""

from __future__ import annotations

import json
import math

PRODUCTS = ("Convolution", "FullyConnected")


def _shapes(symbol, image_shape) -> dict:
    """Every output of ``symbol``'s graph (its variables included), by name, and its shape for
    one image of ``image_shape`` (channels, height, width)."""
    internals = symbol.get_internals()
    _, shapes, _ = internals.infer_shape(data=(1, *image_shape))
    return dict(zip(internals.list_outputs(), shapes))


def product_flops(node, nodes, shapes) -> int:
    """2 x the output's elements x the weight's elements per output feature."""
    weight = nodes[node["inputs"][1][0]]["name"]
    return 2 * math.prod(shapes[node["name"] + "_output"]) * math.prod(shapes[weight][1:])


def flops_per_image(mx, net, image_shape, mode: str) -> float:
    """One image's FLOPs in ``mode`` of the Gluon network ``net`` on images of ``image_shape``
    (channels, height, width)."""
    symbol = net(mx.sym.var("data"))
    shapes = _shapes(symbol, image_shape)
    trained = {p.name for p in net.collect_params().values() if p.grad_req != "null"}
    nodes = json.loads(symbol.tojson())["nodes"]
    backward = mode != "forward"
    needs_gradient, total = [], 0
    for node in nodes:
        inputs = [needs_gradient[index] for index, _, _ in node["inputs"]]
        needs_gradient.append(node["name"] in trained if node["op"] == "null" else any(inputs))
        if node["op"] in PRODUCTS:
            total += product_flops(node, nodes, shapes) * (1 + backward * sum(inputs[:2]))
    return float(total)
