"""TessellateIPU's tile Hessenberg decomposition (jax_ipu.tile.linalg's) under its module name."""

from jax_ipu.tile.linalg import (
    dot_product1d_p,
    hessenberg_correction_vector_p,
    hessenberg_householder_row_update_p,
    ipu_hessenberg,
    ipu_hessenberg_body,
    ipu_hessenberg_iterations,
    ipu_hessenberg_shard_inputs,
)

__all__ = ["dot_product1d_p", "hessenberg_correction_vector_p",
           "hessenberg_householder_row_update_p", "ipu_hessenberg", "ipu_hessenberg_body",
           "ipu_hessenberg_iterations", "ipu_hessenberg_shard_inputs"]
