"""FLOPs of one image of a Flax model, counted on its jaxpr by the rules of torch's
``FlopCounterMode`` (multiply-add = 2), from shapes alone.

Matrix products (``dot_general``) count 2 x the output's elements x the contracted size, and
convolutions (``conv_general_dilated``) 2 x the output's elements x the kernel's window x its
input features, padded positions included, as torch counts them. XLA's own cost analysis
leaves the padded positions out, which puts it 3 to 8% below torch on the same networks. In a
backward mode each product is counted again for each operand that needs a gradient: its
weight, when it follows from the parameters, and its input, when that does too (never the
images), as torch counts a convolution's or a matrix product's backward. Sub-jaxprs (``pjit``,
custom derivatives, ``remat``, ``shard_map``) are followed.
"""

from __future__ import annotations

import math
from typing import List, Tuple

BATCH = 2
"""Images of the traced batch (BatchNorm in training mode needs more than one)."""


def dot_flops(eqn) -> int:
    """2 x the output's elements x the size of the contracted dimensions."""
    (contracting, _), _ = eqn.params["dimension_numbers"]
    lhs = eqn.invars[0].aval.shape
    return 2 * math.prod(eqn.outvars[0].aval.shape) * math.prod(lhs[d] for d in contracting)


def conv_flops(eqn) -> int:
    """2 x the output's elements x the kernel's spatial window x its input features (per
    group, as the kernel holds them)."""
    rhs_spec = eqn.params["dimension_numbers"].rhs_spec
    kernel = eqn.invars[1].aval.shape
    window = math.prod(kernel[d] for d in rhs_spec[2:]) * kernel[rhs_spec[1]]
    return 2 * math.prod(eqn.outvars[0].aval.shape) * window


PRODUCTS = {"dot_general": dot_flops, "conv_general_dilated": conv_flops}


def jaxpr_flops(jaxpr, needs_gradient, backward: bool) -> Tuple[int, List[bool]]:
    """The FLOPs of ``jaxpr`` (an open jaxpr) whose inputs need a gradient where
    ``needs_gradient`` says so, with the backward pass if ``backward``; and which of its outputs
    need one."""
    from jax.extend.core import Var, jaxprs_in_params

    flags = dict(zip(jaxpr.invars, needs_gradient))

    def flag(var) -> bool:
        return isinstance(var, Var) and flags.get(var, False)

    total = 0
    for eqn in jaxpr.eqns:
        inputs = [flag(var) for var in eqn.invars]
        outputs = [any(inputs)] * len(eqn.outvars)
        if eqn.primitive.name in PRODUCTS:
            total += PRODUCTS[eqn.primitive.name](eqn) * (1 + backward * sum(inputs[:2]))
        for sub in jaxprs_in_params(eqn.params):
            one_to_one = len(sub.invars) == len(inputs)
            flops, sub_outputs = jaxpr_flops(
                sub, inputs if one_to_one else [any(inputs)] * len(sub.invars), backward)
            total += flops
            if one_to_one and len(sub.outvars) == len(outputs):
                outputs = sub_outputs
        flags.update(zip(eqn.outvars, outputs))
    return total, [flag(var) for var in jaxpr.outvars]


def flops_per_image(jax, nnx, graph, state, image_shape, mode: str) -> float:
    """One image's FLOPs in ``mode`` of the model ``nnx.merge(graph, *state)``, its parameters
    first in ``state`` (arrays or their shapes), on images of ``image_shape`` (height, width,
    channels)."""
    params, rest = state[0], tuple(state[1:])

    def forward(params, rest, images):
        return nnx.merge(graph, params, *rest, copy=True)(images)

    images = jax.ShapeDtypeStruct((BATCH, *image_shape), jax.numpy.float32)
    closed = jax.make_jaxpr(forward)(params, rest, images)
    backward = mode != "forward"
    trained = [backward] * len(jax.tree.leaves(params))
    needs_gradient = trained + [False] * (len(closed.jaxpr.invars) - len(trained))
    flops, _ = jaxpr_flops(closed.jaxpr, needs_gradient, backward)
    return flops / BATCH
