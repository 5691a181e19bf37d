"""Whose code a traceback frame runs: jax's or this plugin's, an installed library's, Python's own
(the standard library, frozen modules such as runpy), or the user's. One rule for every message
that names "your code"."""

from __future__ import annotations

import functools
import importlib.util
import os
import sysconfig

from jax_ipu.model.ir import SourceLocation

Frame = tuple[str, int, "str | None"]  # file, line, function


def _package_dirs(*names: str) -> tuple[str, ...]:
    dirs = []
    for name in names:
        spec = importlib.util.find_spec(name)
        for d in (spec.submodule_search_locations or []) if spec else []:
            dirs.append(os.path.realpath(d) + os.sep)
    return tuple(dirs)


# Frames inside these are JAX's (or this plugin's, e.g. its lowering rules and feeds), never the
# line a user looks for.
_INTERNAL_DIRS = _package_dirs("jax", "jaxlib", "jax_ipu")
# Where installed packages live: a frame there is a library's, not code the user wrote.
_INSTALLED = ("site-packages", "dist-packages")
_PYTHON_DIRS = tuple({os.path.realpath(sysconfig.get_path(key)) + os.sep
                      for key in ("stdlib", "platstdlib")})
# Python's frozen modules (runpy, importlib...) name their frames "<frozen runpy>"; other names
# in brackets are the user's own code ("<string>" of python -c, "<stdin>", notebook cells).
_FROZEN = "<frozen "


@functools.lru_cache(maxsize=4096)
def _real(filename: str) -> str:
    return os.path.realpath(filename)


def internal(filename: str) -> bool:
    """Whether a frame's file is inside jax, jaxlib or jax_ipu (never the user's line)."""
    return not filename.startswith("<") and _real(filename).startswith(_INTERNAL_DIRS)


def library_of(filename: str) -> str | None:
    """The installed package a frame's file belongs to (site-packages/NAME/...), else None."""
    parts = os.path.normpath(filename).split(os.sep)
    for i, part in enumerate(parts[:-1]):
        if part in _INSTALLED:
            return parts[i + 1].removesuffix(".py")
    return None


def python_own(filename: str) -> bool:
    """Whether a frame runs Python's own code: a frozen module or the standard library."""
    if filename.startswith(_FROZEN):
        return True
    return (not filename.startswith("<") and library_of(filename) is None
            and _real(filename).startswith(_PYTHON_DIRS))


def user(filename: str) -> bool:
    """Whether a frame is the user's own code: none of jax's, a library's or Python's."""
    return not internal(filename) and library_of(filename) is None and not python_own(filename)


def location(scope: str | None, frames: list[Frame] | tuple[Frame, ...]) -> SourceLocation:
    """An op's SourceLocation from its traceback (frames innermost first) and its name-stack
    scope, for every program reader: the innermost frame outside jax, jax_ipu and Python's own,
    with the frames that called it (see SourceLocation.frames)."""
    outside = tuple(f for f in frames if not internal(f[0]) and not python_own(f[0]))
    if outside:
        file, line, function = outside[0]
    elif frames:
        file, line, function = frames[-1]
    else:
        return SourceLocation(scope=scope)
    return SourceLocation(file=file, line=line, function=function, scope=scope, frames=outside)
