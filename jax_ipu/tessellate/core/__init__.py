"""TessellateIPU's core API (tessellate_ipu.core) on jax_ipu.tile."""

from jax_ipu.tessellate.core.tile_array import (
    TileShardedArray,
    tile_barrier,
    tile_constant_replicated,
    tile_constant_sharded,
    tile_data_barrier,
    tile_gather,
    tile_put_replicated,
    tile_put_sharded,
)
from jax_ipu.tessellate.core.tile_common_utils import (
    IpuShapedArray,
    IpuType,
    from_ipu_type_to_numpy_dtype,
    make_ipu_shaped_array,
)
from jax_ipu.tessellate.core.tile_interpreter import (
    create_ipu_tile_primitive,
    create_ipu_tile_primitive_v2,
    declare_ipu_tile_primitive,
    get_ipu_tile_primitive_translation,
    register_ipu_tile_primitive,
    tile_map,
)
from jax_ipu.tessellate.core.tile_interpreter_hw_primitives import (
    hw_cycle_count_p,
    ipu_cycle_count,
    ipu_cycle_count_overhead,
    ipu_hw_cycle_count,
)
from jax_ipu.tessellate.core.tile_interpreter_primitives import (
    IpuTileMapEquation,
    IpuVertexAttributeF32,
    IpuVertexAttributeI32,
    IpuVertexIOInfo,
    IpuVertexIOType,
    from_numpy_dtype_to_ipu_type,
    get_ipu_type_name,
    make_ipu_vertex_attributes,
    make_ipu_vertex_constant_info,
    make_ipu_vertex_in_info,
    make_ipu_vertex_inout_info,
    make_ipu_vertex_inputs,
    make_ipu_vertex_io_info,
    make_ipu_vertex_name_templated,
    make_ipu_vertex_out_info,
    make_ipu_vertex_outputs,
    primitive_clone,
    primitive_num_inout_alias_args,
)
from jax_ipu.tessellate.core.tile_interpreter_vertex_utils import (
    make_ipu_vector1d_worker_offsets,
    make_ipu_vector1d_worker_offsets_and_sizes,
)

__all__ = [
    "IpuShapedArray", "IpuTileMapEquation", "IpuType", "IpuVertexAttributeF32",
    "IpuVertexAttributeI32", "IpuVertexIOInfo", "IpuVertexIOType", "TileShardedArray",
    "create_ipu_tile_primitive", "create_ipu_tile_primitive_v2", "declare_ipu_tile_primitive",
    "from_ipu_type_to_numpy_dtype", "from_numpy_dtype_to_ipu_type",
    "get_ipu_tile_primitive_translation", "get_ipu_type_name", "hw_cycle_count_p",
    "ipu_cycle_count", "ipu_cycle_count_overhead", "ipu_hw_cycle_count",
    "make_ipu_shaped_array", "make_ipu_vector1d_worker_offsets",
    "make_ipu_vector1d_worker_offsets_and_sizes", "make_ipu_vertex_attributes",
    "make_ipu_vertex_constant_info", "make_ipu_vertex_in_info", "make_ipu_vertex_inout_info",
    "make_ipu_vertex_inputs", "make_ipu_vertex_io_info", "make_ipu_vertex_name_templated",
    "make_ipu_vertex_out_info", "make_ipu_vertex_outputs", "primitive_clone",
    "primitive_num_inout_alias_args", "register_ipu_tile_primitive", "tile_barrier",
    "tile_constant_replicated", "tile_constant_sharded", "tile_data_barrier", "tile_gather",
    "tile_map", "tile_put_replicated", "tile_put_sharded",
]
