"""Every tile-level op is a stablehlo.composite named jax_ipu.tile_*: XLA runs its decomposition.

Its attributes carry the placement (tiles, sources, vertex) that compiler/program.py reads for
the model; gradients flow through the decomposition's own derivative."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
from jax import lax

NAMESPACE = "jax_ipu."


def composite_call(name: str, decomposition: Callable[..., Sequence[Any]],
                   arrays: Sequence[Any], attributes: dict[str, Any]) -> list[Any]:
    """The results of `decomposition(*arrays)` (a sequence), computed as the composite
    `jax_ipu.<name>` with `attributes` (ints, strings, tuples of them).

    lax.composite has no derivative of its own: the primal stays the composite and the
    tangent is the decomposition's."""

    def decompose(*xs: Any) -> tuple[Any, ...]:
        return tuple(decomposition(*xs))

    composite = lax.composite(lambda *xs, **_: decompose(*xs), name=NAMESPACE + name)
    # Constants the decomposition closes over become leading operands: the model reads the
    # op's own inputs as the last `operands`.
    attributes = {**attributes, "operands": len(arrays)}

    @jax.custom_jvp
    def call(*xs: Any) -> tuple[Any, ...]:
        return composite(*xs, **attributes)

    @call.defjvp
    def call_jvp(primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> tuple[Any, Any]:
        return call(*primals), jax.jvp(decompose, primals, tangents)[1]

    return list(call(*arrays))
