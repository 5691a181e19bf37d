"""TessellateIPU's dot_general on tiles: lax's, mapped by jax_ipu.tile at the model's rates.

TessellateIPU picks a Poplar convolution vertex (ipu_vertex_type=IpuConvVertexType...); here the
option is accepted and dropped: the model costs the product with its own matmul rules."""

import enum

from jax.lax import dot_general_p


class IpuConvVertexType(enum.IntEnum):
    Automatic = 0
    ConvPartial1x1 = 1
    ConvPartialHMAC = 2


__all__ = ["IpuConvVertexType", "dot_general_p"]
