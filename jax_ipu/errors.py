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
    """A tile-level program (jax_ipu.tile) names tiles it cannot use: a wrong count, a tile past
    the chip's, or arrays on different tiles where one set is needed."""


class IpuTileTypeError(IpuError, TypeError):
    """A tile-level function got a plain array where it needs a TileShardedArray, or a primitive
    it cannot map over tiles."""


class IpuVertexBuildError(IpuError):
    """A custom C++ vertex could not be built: no C++ compiler, or the compiler's errors."""


# XLA:CPU's words for an exception a host callback raised, followed by Python's traceback of it
# and, last, "ExceptionName: message".
_CALLBACK_FAILED = "CpuCallback error calling callback: "
_OURS = {cls.__name__: cls for cls in (IpuError, IpuConfigError, IpuCompileError,
                                       IpuOutOfMemoryError, IpuFeedError)}


def from_host_callback(message: str) -> IpuError | None:
    """The jax_ipu error a host callback raised while a program ran (an empty InfeedQueue...),
    from the text XLA:CPU makes of it: its own message first, the callback's traceback after.
    None when `message` is not such a text. The name is looked up in this module's own table."""
    if not message.startswith(_CALLBACK_FAILED):
        return None
    text = message[len(_CALLBACK_FAILED):]
    found = None
    for name in _OURS:
        at = text.rfind(f"\n{name}: ")
        if at >= 0 and (found is None or at > found[0]):
            found = (at, name)
    if found is None:
        return None
    at, name = found
    own = text[at + len(name) + 3:].strip()
    return _OURS[name](f"{own}\n\nRaised by a host callback while the program ran; its "
                       f"traceback:\n{text[:at].strip()}")
