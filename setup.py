"""Build of the one C extension, the PJRT_Api table; everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "jax_ipu.pjrt._table",
            sources=["jax_ipu/pjrt/_table.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        )
    ]
)
