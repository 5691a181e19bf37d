"""TessellateIPU's helpers adding a directory to PATH or CPATH."""

from __future__ import annotations

import os


def env_append_path(envname: str, path: str) -> None:
    """Append `path` to the colon-separated variable `envname` unless it is there already."""
    current = os.environ.get(envname, "")
    if path not in current.split(os.pathsep):
        os.environ[envname] = f"{current}{os.pathsep}{path}" if current else path


def env_cpath_append(path: str) -> None:
    env_append_path("CPATH", path)


def env_path_append(path: str) -> None:
    env_append_path("PATH", path)
