"""TessellateIPU's tile Jacobi eigensolver (jax_ipu.tile.linalg's) under its module name."""

from jax_ipu.tile.linalg import (
    INDEX_PREFIX,
    ipu_eigh,
    ipu_jacobi_eigh,
    ipu_jacobi_eigh_body,
    ipu_jacobi_eigh_iteration,
    jacobi_initial_pqindices,
    jacobi_initial_rotation_set,
    jacobi_next_rotation_set,
    jacobi_sort_rotation_set,
    jacobi_sym_schur2_p,
    jacobi_update_eigenvectors_p,
    jacobi_update_first_step_p,
    jacobi_update_second_step_p,
    tile_rotate_columns,
    tile_sharded_pq_columns,
)

__all__ = ["INDEX_PREFIX", "ipu_eigh", "ipu_jacobi_eigh", "ipu_jacobi_eigh_body",
           "ipu_jacobi_eigh_iteration", "jacobi_initial_pqindices", "jacobi_initial_rotation_set",
           "jacobi_next_rotation_set", "jacobi_sort_rotation_set", "jacobi_sym_schur2_p",
           "jacobi_update_eigenvectors_p", "jacobi_update_first_step_p",
           "jacobi_update_second_step_p", "tile_rotate_columns", "tile_sharded_pq_columns"]
