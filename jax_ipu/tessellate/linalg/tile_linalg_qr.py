"""TessellateIPU's tile QR (jax_ipu.tile.linalg's) under its module name."""

from jax_ipu.tessellate.core.tile_interpreter_vertex_utils import make_ipu_vector1d_worker_offsets
from jax_ipu.tile.linalg import (
    dot_product1d_p,
    ipu_qr,
    ipu_qr_iterations,
    ipu_qr_shard_inputs,
    qr_correction_vector_p,
    qr_householder_row_update_p,
)

__all__ = ["dot_product1d_p", "ipu_qr", "ipu_qr_iterations", "ipu_qr_shard_inputs",
           "make_ipu_vector1d_worker_offsets", "qr_correction_vector_p",
           "qr_householder_row_update_p"]
