"""Exceptions jax_ipu raises to users.

Every user-facing failure is one of these, so messages stay consistent and the PJRT layer can map
them onto PJRT error codes."""


class IpuError(Exception):
    """Base class of every jax_ipu error."""


class IpuConfigError(IpuError, ValueError):
    """A flag or environment variable has an invalid value."""


class IpuCompileError(IpuError):
    """The program cannot run on the chosen IPU (dtype, op or custom call the chip lacks)."""


class IpuOutOfMemoryError(IpuCompileError):
    """The program does not fit in the tile memory of the chosen IPU."""


class IpuFeedError(IpuError, ValueError):
    """An infeed or outfeed queue was misused: a batch of the wrong shape or dtype, an empty
    queue when the device asked for a batch, a queue used without its devices' axis name."""


class IpuTileError(IpuError, ValueError):
    """A tile-level program (jax_ipu.tile) names tiles it cannot use: a wrong count, a tile twice,
    a tile past the chip's, or arrays on different tiles where one set is needed."""


class IpuTileTypeError(IpuError, TypeError):
    """A tile-level function got a plain array where it needs a TileShardedArray, or a primitive
    it cannot map over tiles."""


class IpuVertexBuildError(IpuError):
    """A custom C++ vertex could not be built: no C++ compiler, or the compiler's errors."""
