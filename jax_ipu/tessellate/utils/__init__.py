"""TessellateIPU's utils (tessellate_ipu.utils)."""

from jax_ipu.tessellate.utils.env import env_cpath_append, env_path_append
from jax_ipu.tessellate.utils.ipu_device import IpuDevice, IpuTargetType, is_ipu_model
from jax_ipu.tessellate.utils.typing import ArrayLike, DType, DTypeLike, NDArray, Shape

__all__ = ["ArrayLike", "DType", "DTypeLike", "IpuDevice", "IpuTargetType", "NDArray", "Shape",
           "env_cpath_append", "env_path_append", "is_ipu_model"]
