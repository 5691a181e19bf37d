"""Build of the one C extension, the PJRT_Api table; everything else is in pyproject.toml."""

from setuptools import Extension, setup

CSRC = "jax_ipu/pjrt/csrc/"
# One file per PJRT object (see csrc/pjrt.h); table.c holds the table and the module.
SOURCES = ["table.c", "error.c", "event.c", "handle.c", "memory.c", "buffer.c", "executable.c",
           "execute.c", "profiler.c"]

setup(
    ext_modules=[
        Extension(
            "jax_ipu.pjrt._table",
            sources=[CSRC + name for name in SOURCES],
            depends=[CSRC + "pjrt.h"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter",
                                "-fvisibility=hidden"],
        )
    ]
)
