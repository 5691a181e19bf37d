"""TessellateIPU's binary extensions: in-place binary ops and scaled add/sub (jax_ipu.tile's)."""

from typing import Any

from jax_ipu.tile.primitives import (
    add_inplace_p,
    atan2_inplace_p,
    div_inplace_p,
    max_inplace_p,
    min_inplace_p,
    mul_inplace_p,
    pow_inplace_p,
    rem_inplace_p,
    scaled_add_p,
    scaled_sub_p,
    sub_inplace_p,
)


def scaled_add(a: Any, b: Any, sb: Any) -> Any:
    """a + sb * b (sb holds one value)."""
    return scaled_add_p.bind(a, b, sb)


def scaled_sub(a: Any, b: Any, sb: Any) -> Any:
    """a - sb * b (sb holds one value)."""
    return scaled_sub_p.bind(a, b, sb)


__all__ = ["add_inplace_p", "atan2_inplace_p", "div_inplace_p", "max_inplace_p",
           "min_inplace_p", "mul_inplace_p", "pow_inplace_p", "rem_inplace_p", "scaled_add",
           "scaled_add_p", "scaled_sub", "scaled_sub_p", "sub_inplace_p"]
