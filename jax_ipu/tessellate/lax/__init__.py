"""TessellateIPU's lax (tessellate_ipu.lax): lax primitives it maps, and its extensions."""

from jax.lax import (
    abs_p,
    asin_p,
    cbrt_p,
    ceil_p,
    erf_p,
    exp_p,
    expm1_p,
    floor_p,
    is_finite_p,
    log1p_p,
    log_p,
    neg_p,
    population_count_p,
    round_p,
    rsqrt_p,
    select_n_p,
    sign_p,
    sin_p,
    sqrt_p,
    tan_p,
    tanh_p,
)

from jax_ipu.tessellate.lax import (
    tile_lax_binary,
    tile_lax_dot,
    tile_lax_reduce,
    tile_lax_unary,
    tile_random,
)
from jax_ipu.tessellate.lax.tile_lax_array import (
    bitcast_convert_type_p,
    fill,
    fill_p,
    reshape_p,
    tile_fill,
    tile_sharded_identity,
)
from jax_ipu.tessellate.lax.tile_lax_binary import (
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
from jax_ipu.tessellate.lax.tile_lax_cumulative_ops import cummax_p, cummin_p, cumprod_p, cumsum_p
from jax_ipu.tessellate.lax.tile_lax_dot import IpuConvVertexType
from jax_ipu.tessellate.lax.tile_lax_gather import gather_p
from jax_ipu.tessellate.lax.tile_lax_scatter import (
    scatter_add_p,
    scatter_max_p,
    scatter_min_p,
    scatter_mul_p,
    scatter_p,
)
from jax_ipu.tessellate.lax.tile_lax_small_dot import rotation2d_p
from jax_ipu.tessellate.lax.tile_lax_unary import (
    abs_inplace_p,
    asin_inplace_p,
    cbrt_inplace_p,
    ceil_inplace_p,
    erf_inplace_p,
    exp_inplace_p,
    expm1_inplace_p,
    floor_inplace_p,
    is_finite_inplace_p,
    log1p_inplace_p,
    log_inplace_p,
    neg_inplace_p,
    population_count_inplace_p,
    round_inplace_p,
    rsqrt_inplace_p,
    sign_inplace_p,
    sin_inplace_p,
    sqrt_inplace_p,
    tan_inplace_p,
    tile_copy,
)
from jax_ipu.tessellate.lax.tile_random import (
    tile_get_hw_seeds,
    tile_random_normal,
    tile_random_uniform,
    tile_set_hw_seeds,
)

__all__ = [
    "IpuConvVertexType", "abs_inplace_p", "abs_p", "add_inplace_p", "asin_inplace_p", "asin_p",
    "atan2_inplace_p", "bitcast_convert_type_p", "cbrt_inplace_p", "cbrt_p", "ceil_inplace_p",
    "ceil_p", "cummax_p", "cummin_p", "cumprod_p", "cumsum_p", "div_inplace_p",
    "erf_inplace_p", "erf_p", "exp_inplace_p", "exp_p", "expm1_inplace_p", "expm1_p", "fill",
    "fill_p", "floor_inplace_p", "floor_p", "gather_p", "is_finite_inplace_p", "is_finite_p",
    "log1p_inplace_p", "log1p_p", "log_inplace_p", "log_p", "max_inplace_p", "min_inplace_p",
    "mul_inplace_p", "neg_inplace_p", "neg_p", "population_count_inplace_p",
    "population_count_p", "pow_inplace_p", "rem_inplace_p", "reshape_p", "rotation2d_p",
    "round_inplace_p", "round_p", "rsqrt_inplace_p", "rsqrt_p", "scaled_add_p", "scaled_sub_p",
    "scatter_add_p", "scatter_max_p", "scatter_min_p", "scatter_mul_p", "scatter_p",
    "select_n_p", "sign_inplace_p", "sign_p", "sin_inplace_p", "sin_p", "sqrt_inplace_p",
    "sqrt_p", "sub_inplace_p", "tan_inplace_p", "tan_p", "tanh_p", "tile_copy",
    "tile_fill", "tile_get_hw_seeds", "tile_lax_binary", "tile_lax_dot", "tile_lax_reduce",
    "tile_lax_unary", "tile_random", "tile_random_normal", "tile_random_uniform",
    "tile_set_hw_seeds", "tile_sharded_identity",
]
