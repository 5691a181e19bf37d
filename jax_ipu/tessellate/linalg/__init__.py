"""TessellateIPU's linalg (tessellate_ipu.linalg) on jax_ipu.tile.linalg."""

from jax_ipu.tessellate.linalg import tile_linalg_jacobi, tile_linalg_qr
from jax_ipu.tessellate.linalg.tile_linalg_hessenberg import ipu_hessenberg
from jax_ipu.tessellate.linalg.tile_linalg_jacobi import ipu_eigh
from jax_ipu.tessellate.linalg.tile_linalg_qr import ipu_qr

__all__ = ["ipu_eigh", "ipu_hessenberg", "ipu_qr", "tile_linalg_jacobi", "tile_linalg_qr"]
