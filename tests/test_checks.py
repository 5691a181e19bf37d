"""Tests of compiler/checks.py: what each IPU version refuses at compile time, and how it says so.

Messages must name the op, the dtype, the user's source line, the chip, and a way out."""

from __future__ import annotations

import inspect
import os
import sysconfig

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_ipu.compiler.checks import (
    ALLOWED_CUSTOM_CALLS,
    MAX_REPORTED,
    Caller,
    _Checker,
    check_program,
    compile_caller,
)
from jax_ipu.compiler.frames import library_of, python_own, user
from jax_ipu.compiler.program import read_program
from jax_ipu.errors import IpuCompileError
from jax_ipu.model.ir import SourceLocation
from jax_ipu.model.targets import get_target
from tests._lowering import portable_artifact

F32 = np.float32


def _line_of(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def to_bf16(x):
    y = x * 2.0
    return y.astype(jnp.bfloat16)


def to_fp8(x):
    return x.astype(jnp.float8_e4m3fn)


def to_fp8_fnuz(x):
    return x.astype(jnp.float8_e4m3fnuz), x.astype(jnp.float8_e5m2fnuz)


@pytest.mark.parametrize("version", ["ipu1", "ipu2", "ipu21"])
def test_float32_float16_int_bool_pass(version):
    def f(x, i):
        return (x.astype(jnp.float16) * 2).astype(jnp.float32), i + 1, x > 0

    p = read_program(portable_artifact(f, np.ones((3,), F32), np.ones((3,), np.int32)))
    assert check_program(p, get_target(version)) is None


@pytest.mark.parametrize("version", ["ipu1", "ipu2", "ipu21"])
def test_bfloat16_refused_on_every_ipu(version):
    # Poplar's device types have no bfloat16 (targets.py cites them)
    p = read_program(portable_artifact(to_bf16, np.ones((3,), F32)))
    with pytest.raises(IpuCompileError) as err:
        check_program(p, get_target(version))
    msg = str(err.value)
    assert "stablehlo.convert" in msg and "bfloat16" in msg and version in msg
    assert f"{__file__}:{_line_of(to_bf16, 'astype')}" in msg
    assert "float16 or float32" in msg and "no bfloat16 type" in msg


def test_ipu21_runs_its_own_fp8_formats_only():
    target = get_target("ipu21")
    check_program(read_program(portable_artifact(to_fp8_fnuz, np.ones((3,), F32))), target)
    with pytest.raises(IpuCompileError, match="float8_e4m3fn ") as err:
        check_program(read_program(portable_artifact(to_fp8, np.ones((3,), F32))), target)
    assert "use float8_e4m3fnuz or float8_e5m2fnuz" in str(err.value)
    with pytest.raises(IpuCompileError, match="float8_e4m3fnuz") as err:
        check_program(
            read_program(portable_artifact(to_fp8_fnuz, np.ones((3,), F32))), get_target("ipu2")
        )
    assert "jax_ipu_model_version='ipu21'" in str(err.value)


def test_float64_refused_everywhere_with_x64_hint():
    def f(x):
        return jnp.exp(x) + 1

    with jax.enable_x64(True):
        p = read_program(portable_artifact(f, np.ones((3,), np.float64)))
    for version in ("ipu1", "ipu2", "ipu21"):
        with pytest.raises(IpuCompileError) as err:
            check_program(p, get_target(version))
        msg = str(err.value)
        assert "float64" in msg and "stablehlo.exponential" in msg
        assert "argument 0" in msg and "jax_enable_x64" in msg
        assert f"{__file__}:{_line_of(f, 'jnp.exp')}" in msg


def complex_product(x):
    return (x * 1j).real


@pytest.mark.parametrize("version", ["ipu1", "ipu2", "ipu21"])
def test_complex64_runs_as_pairs_of_float32_and_complex128_is_refused_as_float64(version):
    target = get_target(version)
    check_program(read_program(portable_artifact(complex_product, np.ones((3,), F32))), target)
    with jax.enable_x64(True):
        p = read_program(portable_artifact(complex_product, np.ones((3,), np.float64)))
    with pytest.raises(IpuCompileError) as err:
        check_program(p, target)
    msg = str(err.value)
    line = f"{__file__}:{_line_of(complex_product, '1j')}"
    assert f"stablehlo.multiply with complex128 at {line}" in msg
    assert f"{version} has no complex128" in msg and f"{version} has no float64" in msg
    assert f"How to fix complex128: your code makes complex128 at {line}" in msg
    assert "use complex64; if you enabled jax_enable_x64, keep the arrays complex64" in msg


def test_all_offending_ops_reported_and_capped():
    # One op per line of a generated source file, so that every problem is a line of its own.
    count = MAX_REPORTED + 5
    body = "".join(f"    y{i} = (x + {i}).astype(jnp.bfloat16)\n" for i in range(count))
    source = f"def f(x):\n{body}    return [{', '.join(f'y{i}' for i in range(count))}]\n"
    scope = {"jnp": jnp}
    exec(compile(source, "generated.py", "exec"), scope)
    p = read_program(portable_artifact(scope["f"], np.ones((3,), F32)))
    with pytest.raises(IpuCompileError) as err:
        check_program(p, get_target("ipu2"))
    msg = str(err.value)
    assert f"({count} problem(s))" in msg
    assert msg.count("  - ") == MAX_REPORTED
    assert "generated.py:2 (f)" in msg and f"generated.py:{MAX_REPORTED + 1} (f)" in msg
    assert "... and 5 more" in msg
    # The way out is said once, after the list.
    assert msg.count("How to fix bfloat16: use float16 or float32") == 1


def test_problems_on_one_line_are_counted_not_repeated():
    def f(x):
        return [(x + i).astype(jnp.bfloat16) for i in range(MAX_REPORTED + 5)]

    p = read_program(portable_artifact(f, np.ones((3,), F32)))
    with pytest.raises(IpuCompileError) as err:
        check_program(p, get_target("ipu2"))
    msg = str(err.value)
    line = _line_of(f, "astype")
    assert f"({MAX_REPORTED + 5} problem(s))" in msg and msg.count("  - ") == 1
    assert f"stablehlo.convert with bfloat16 at {__file__}:{line} (" in msg
    assert f"): ipu2 has no bfloat16 (and {MAX_REPORTED + 4} more like it)" in msg


def test_constants_take_the_line_of_their_first_use():
    def f(x):
        y = x * 2
        return jnp.sin(y.astype(jnp.float64)) * 1.5

    with jax.enable_x64(True):
        p = read_program(portable_artifact(f, np.ones((3,), F32)))
    with pytest.raises(IpuCompileError) as err:
        check_program(p, get_target("ipu2"))
    constants = [line for line in str(err.value).splitlines() if "stablehlo.constant" in line]
    assert constants and all(f"{__file__}:{_line_of(f, 'jnp.sin')}" in c for c in constants)


def test_library_frames_are_named_with_the_callers_line():
    assert library_of("/usr/lib/python3/dist-packages/optax/_src/alias.py") == "optax"
    assert library_of("/venv/lib/python3.11/site-packages/six.py") == "six"
    assert library_of("/home/me/project/train.py") is None
    frames = (("/venv/lib/python3.11/site-packages/optax/_src/transform.py", 90, "update_fn"),
              ("/venv/lib/python3.11/site-packages/optax/_src/combine.py", 60, "update_fn"),
              ("/home/me/train.py", 12, "step"), ("/home/me/train.py", 40, "main"))
    where = _Checker(read_program(portable_artifact(to_bf16, np.ones((3,), F32))),
                     get_target("ipu2"), None).where(SourceLocation(*frames[0], frames=frames))
    assert where == (" at /venv/lib/python3.11/site-packages/optax/_src/transform.py:90 "
                     "(update_fn) inside the library 'optax', called from your code at "
                     "/home/me/train.py:12 (step)", frames)


STDLIB = sysconfig.get_path("stdlib")


def test_your_code_is_neither_jax_a_library_nor_pythons_own():
    assert user("/home/me/train.py") and user("<string>") and user("<stdin>")
    assert user(__file__)
    assert not user("<frozen runpy>") and python_own("<frozen runpy>")
    assert not user(os.__file__) and python_own(os.__file__)
    assert not user(f"{STDLIB}/concurrent/futures/thread.py")
    assert not user(jax.__file__) and not python_own(jax.__file__)
    assert not user("/venv/lib/python3.11/site-packages/optax/_src/alias.py")


def _where(frames) -> str:
    checker = _Checker(read_program(portable_artifact(to_bf16, np.ones((3,), F32))),
                       get_target("ipu2"), None)
    return checker.where(SourceLocation(*frames[0], frames=frames))[0]


def test_pythons_own_frames_are_never_your_code():
    # A library run with `python -m`: only the library and runpy are on the stack.
    app = "/venv/lib/python3.11/site-packages/app/__main__.py"
    assert _where(((app, 13, "main"), ("<frozen runpy>", 88, "_run_code"),
                   ("<frozen runpy>", 198, "_run_module_as_main"))) == (
        f" at {app}:13 (main) inside the library 'app', with no code of yours on the call "
        "stack")
    # Called through the standard library (a thread pool) from the user's line.
    optax = "/venv/lib/python3.11/site-packages/optax/_src/transform.py"
    assert _where(((optax, 90, "update_fn"),
                   (f"{STDLIB}/concurrent/futures/thread.py", 58, "run"),
                   ("/home/me/train.py", 12, "step"))) == (
        f" at {optax}:90 (update_fn) inside the library 'optax', called from your code at "
        "/home/me/train.py:12 (step)")


def test_an_op_without_a_line_points_at_the_compiling_call():
    program = read_program(portable_artifact(to_bf16, np.ones((3,), F32)))
    caller = Caller((("/home/me/train.py", 7, "main"),), eager=False)
    checker = _Checker(program, get_target("ipu2"), caller)
    assert checker.where(SourceLocation()) == (
        " (no source line: jax made it for the call named above)", ())
    assert checker.header(2) == ("jit_to_bf16 cannot run on ipu2 (2 problem(s)), compiled for "
                                 "the call at /home/me/train.py:7 (main):")
    assert _Checker(program, get_target("ipu2"), None).where(SourceLocation()) == (
        " at <unknown>", ())
    # Outside a compile (as here) no thread is compiling: there is no caller to name.
    assert compile_caller() is None


def test_unknown_custom_call_refused_annotations_allowed():
    def f(x):
        return jax.ffi.ffi_call("my_kernel", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    text = jax.jit(f).lower(np.ones((3,), F32)).as_text(debug_info=True)
    with pytest.raises(IpuCompileError, match="custom_call @my_kernel.*no IPU implementation"):
        check_program(read_program(text), get_target("ipu2"))
    allowed = text.replace("my_kernel", "Sharding")
    assert "Sharding" in ALLOWED_CUSTOM_CALLS
    assert check_program(read_program(allowed), get_target("ipu2")) is None
    assert all(reason for reason in ALLOWED_CUSTOM_CALLS.values())
