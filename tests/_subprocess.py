"""Run a snippet of Python in a fresh interpreter: the ipu client is made once per process, so
flags and environment variables are tested in children."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap


def run_python(code: str, env: dict[str, str] | None = None, timeout: float = 120,
               check: bool = True) -> subprocess.CompletedProcess:
    """Run `code` in a new interpreter with extra environment variables; return the result."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_IPU_", "POPLAR_"))}
    full_env.update(env or {})
    full_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env,
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc
