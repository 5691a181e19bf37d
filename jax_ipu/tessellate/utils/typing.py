"""TessellateIPU's typing aliases."""

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike, NDArray

DType = np.dtype
DimSize = int | Any
Shape = Sequence[DimSize]

__all__ = ["ArrayLike", "DType", "DTypeLike", "DimSize", "NDArray", "Shape"]
