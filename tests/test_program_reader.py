"""Tests of compiler/program.py: StableHLO in, the model's IR out.

Programs are lowered from small jitted functions on CPU, with their real source locations."""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.interpreters import mlir
from jaxlib.mlir.dialects import stablehlo

from jax_ipu.compiler.program import read_program
from jax_ipu.errors import IpuCompileError
from jax_ipu.model.ir import TensorType
from tests._lowering import portable_artifact

F32 = np.float32


def _line_of(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def scaled_sine(x):
    return jnp.sin(x) * 2.0


def looped(x, w):
    y = x @ w
    y = jax.lax.fori_loop(0, 7, lambda i, c: scaled_sine(c), y)
    return y.sum(axis=0), y.astype(jnp.float16)


def test_portable_artifact_signature_and_name():
    code = portable_artifact(looped, np.ones((4, 3), F32), np.ones((3, 3), F32))
    assert code.startswith(b"ML\xefR")
    p = read_program(code)
    assert p.name == "jit_looped"
    assert p.inputs == (TensorType((4, 3), "float32"), TensorType((3, 3), "float32"))
    assert p.outputs == (TensorType((3,), "float32"), TensorType((4, 3), "float16"))
    assert p.num_replicas == 1 and p.num_partitions == 1
    assert p.input_names == ("x", "w")
    assert len(p.output_ids) == 2


def test_ops_attributes_and_locations():
    p = read_program(portable_artifact(looped, np.ones((4, 3), F32), np.ones((3, 3), F32)))
    dot = next(op for op in p.ops if op.kind == "dot_general")
    assert dot.attributes["dot_dimension_numbers"]["lhs_contracting_dimensions"] == [1]
    assert dot.attributes["dot_dimension_numbers"]["rhs_contracting_dimensions"] == [0]
    assert dot.results == (TensorType((4, 3), "float32"),)
    assert dot.location.file == __file__
    assert dot.location.line == _line_of(looped, "x @ w")
    assert dot.location.function == "looped"
    reduce = next(op for op in p.ops if op.kind == "reduce")
    assert reduce.attributes["dimensions"] == [0]
    assert [o.kind for o in reduce.regions[0].ops] == ["add"]


def test_while_trip_count_and_inlined_call():
    p = read_program(portable_artifact(looped, np.ones((4, 3), F32), np.ones((3, 3), F32)))
    loop = next(op for op in p.ops if op.kind == "while")
    assert loop.trip_count == 7
    body_kinds = [o.kind for o in loop.regions[1].ops]
    # scaled_sine was a private function: its ops are inlined with their own source line
    assert "call" not in body_kinds and "sine" in body_kinds
    sine = next(o for o in loop.regions[1].ops if o.kind == "sine")
    assert sine.location.line == _line_of(scaled_sine, "jnp.sin")
    assert sine.location.function == "scaled_sine"


def test_data_dependent_while_has_no_trip_count():
    def f(x):
        return jax.lax.while_loop(lambda c: c.sum() < 100.0, lambda c: c * 2.0, x)

    p = read_program(portable_artifact(f, np.ones((3,), F32)))
    loop = next(op for op in p.ops if op.kind == "while")
    assert loop.trip_count is None


def test_scan_trip_count():
    def f(xs):
        return jax.lax.scan(lambda c, x: (c + x, c * x), 0.0, xs)

    p = read_program(portable_artifact(f, np.ones((11,), F32)))
    assert next(op for op in p.ops if op.kind == "while").trip_count == 11


def test_donation_aliases():
    def f(a, b, c):
        return c + b, a * 2.0

    args = [np.ones((4,), F32)] * 3
    p = read_program(portable_artifact(f, *args, donate_argnums=(0, 2)))
    assert p.donated_inputs == frozenset({0, 2})


def test_mlir_text_and_bytecode_inputs():
    lowered = jax.jit(looped).lower(np.ones((4, 3), F32), np.ones((3, 3), F32))
    from_text = read_program(lowered.as_text(debug_info=True))
    from_bytes = read_program(mlir.module_to_bytecode(lowered.compiler_ir("stablehlo")))
    kinds = [op.kind for op in from_text.walk()]
    assert kinds == [op.kind for op in from_bytes.walk()]
    assert "dot_general" in kinds and from_text.name == "jit_looped"


def test_unknown_ops_do_not_crash():
    # chlo ops (only in MLIR text: artifacts legalize them) and custom calls are kept as ops
    def f(x):
        return jax.lax.erf_inv(x), jax.ffi.ffi_call(
            "my_kernel", jax.ShapeDtypeStruct(x.shape, x.dtype)
        )(x)

    p = read_program(jax.jit(f).lower(np.ones((3,), F32)).as_text(debug_info=True))
    assert any(op.name == "chlo.erf_inv" for op in p.walk())
    calls = [op for op in p.walk() if op.kind == "custom_call"]
    assert calls and calls[0].attributes["call_target_name"] == "my_kernel"


def test_garbage_is_a_compile_error():
    with pytest.raises(IpuCompileError, match="cannot read"):
        read_program(b"not a module at all")


def test_constants_and_dtypes():
    def f(x):
        return x.astype(jnp.int32) + 3, x > 0

    p = read_program(portable_artifact(f, np.ones((2,), F32)))
    assert p.outputs == (TensorType((2,), "int32"), TensorType((2,), "bool"))
    consts = [op.attributes["value"] for op in p.ops if op.kind == "constant"]
    assert 3 in consts


def test_unused_arguments_are_pruned_like_jax():
    def f(a, b):
        return a * 2.0

    p = read_program(portable_artifact(f, np.ones((2,), F32), np.ones((5,), F32)))
    assert p.inputs == (TensorType((2,), "float32"),)
    assert stablehlo.get_smaller_version("1.13.7", stablehlo.get_current_version()) == "1.13.7"
