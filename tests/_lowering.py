"""Helpers for the model tests: lower a jitted function to what PJRT's Client_Compile receives.

JAX hands PJRT a StableHLO portable artifact with debug locations; these build the same bytes."""

from __future__ import annotations

import jax
from jaxlib.mlir.dialects import stablehlo

from jax_ipu.compiler.judge import judge_program
from jax_ipu.compiler.program import read_program
from jax_ipu.model.ir import Program
from jax_ipu.model.report import ProgramReport
from jax_ipu.model.targets import Target

# The artifact version PJRT receives from jaxlib 0.10.2 (see PJRT_NOTES.md).
PJRT_ARTIFACT_VERSION = "1.13.7"


def portable_artifact(fn, *args, **jit_kwargs) -> bytes:
    """The portable artifact of jax.jit(fn, **jit_kwargs) lowered for args, with locations."""
    text = jax.jit(fn, **jit_kwargs).lower(*args).as_text(debug_info=True)
    return stablehlo.serialize_portable_artifact_str(text, PJRT_ARTIFACT_VERSION)


def judge(code: bytes | str, target: Target, allow_out_of_memory: bool = False
          ) -> tuple[Program, ProgramReport]:
    """Program and report of `code`, as compiler.driver.compile reads and judges it (without
    building its numerics)."""
    program = read_program(code)
    return program, judge_program(program, target, allow_out_of_memory)
