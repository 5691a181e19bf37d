"""Refuse at compile time what the chosen IPU cannot run: dtypes it lacks, unknown custom calls.

One error names the user's call, lists each offending op with its line (and library), and fixes."""

from __future__ import annotations

import inspect
import sys
from collections import Counter
from dataclasses import dataclass

from jax_ipu import _internals
from jax_ipu.compiler import frames as frame_of
from jax_ipu.compiler.frames import Frame, library_of
from jax_ipu.errors import IpuCompileError
from jax_ipu.model.ir import Op, Program, SourceLocation, TensorType
from jax_ipu.model.targets import Target

MAX_REPORTED = 10

# Custom calls that are harmless on the IPU: annotations XLA strips, or host callbacks the
# runtime serves on the host. Targets with an IPU implementation join this table.
ALLOWED_CUSTOM_CALLS: dict[str, str] = {
    "Sharding": "sharding annotation; no computation",
    "SPMDFullToShardShape": "sharding annotation; a single device needs no reshaping",
    "SPMDShardToFullShape": "sharding annotation; a single device needs no reshaping",
    "annotate_device_placement": "memory-kind annotation; no computation",
    "LayoutConstraint": "with_sharding_constraint with a concrete Layout: XLA:CPU's layout "
                        "assignment honours it in the numerics; tile memory has no XLA layout",
    "dce_sink": "keeps a value alive against dead-code elimination; no computation",
    "InspectSharding": "jax.debug.inspect_array_sharding; the partitioner consumes it",
    "xla_python_cpu_callback": "host callback, run on the host by the runtime",
    "xla_ffi_python_cpu_callback": "host callback (FFI form), run on the host by the runtime",
    "xla_python_gpu_callback": "host callback emitted by some lowerings; run on the host",
    "xla_ffi_partitioned_python_cpu_callback": "host callback, run on the host by the runtime",
}

# The 64-bit types jax_enable_x64 makes, and the 32-bit type each can be kept as instead.
_NARROW = {"float64": "float32", "complex128": "complex64"}


def _x64_hint(dtype: str) -> str:
    narrow = _NARROW[dtype]
    return (f"use {narrow}; if you enabled jax_enable_x64, keep the arrays {narrow} "
            f"(e.g. .astype(jnp.{narrow})), trace this program with x64 off "
            "(`with jax.enable_x64(False):` around the call), or disable x64")



def _hint(dtype: str, target: Target) -> str:
    if dtype in _NARROW:
        return _x64_hint(dtype)
    if dtype == "bfloat16":
        return "use float16 or float32 (Poplar has no bfloat16 type on any IPU)"
    if dtype.startswith("float8") or dtype.startswith("float4"):
        eight = sorted(d for d in target.supported_dtypes if d.startswith("float8"))
        if eight:
            return (f"use {' or '.join(eight)}, the 8-bit floats of {target.version} (NaN in "
                    "the negative-zero code, no infinities), or float16")
        return ("use float16, or jax_ipu_model_version='ipu21' with float8_e4m3fnuz or "
                "float8_e5m2fnuz")
    return f"use one of: {', '.join(sorted(target.supported_dtypes - {'token'}))}"


_X64_OFF = (
    "trace the program with x64 off, `with jax.enable_x64(False):` around the call (jax "
    "traces at the first call; the library then computes in {narrow}), or turn x64 off for the "
    "process (jax.config.update('jax_enable_x64', False) or JAX_ENABLE_X64=0), or run this "
    "computation on the cpu device. The IPU has no float64 (so no complex128, its pairs), and "
    "jax-ipu never demotes it to {narrow} silently"
)
_SHOWN_LINES = 3


def _float64_hint(made: list[tuple[Frame, ...]], dtype: str = "float64") -> str:
    """What to do about float64 (or complex128), by who made it: the user's own lines first
    (they are what the user can change), then the libraries that compute in it by themselves."""
    narrow = _NARROW[dtype]
    off = _X64_OFF.format(narrow=narrow)
    yours = list(dict.fromkeys(_frame_text(f[0]) for f in made if frame_of.user(f[0][0])))
    libraries = sorted({name for f in made if (name := library_of(f[0][0])) is not None})
    names = " and ".join(f"'{name}'" for name in libraries)
    if not yours:
        if not libraries:
            return _x64_hint(dtype)
        return (f"the {dtype} is made inside {names}, not in your code: with jax_enable_x64 "
                f"on, the library computes in {dtype} whatever your arrays are, so keeping "
                f"them {narrow} cannot remove it. Either {off}")
    more = len(yours) - _SHOWN_LINES
    lines = ", ".join(yours[:_SHOWN_LINES]) + (f" and {more} more" if more > 0 else "")
    hint = f"your code makes {dtype} at {lines}: {_x64_hint(dtype)}"
    if libraries:
        hint += (f". {names} also compute{'s' if len(libraries) == 1 else ''} in {dtype} "
                 "(the lines above inside it); if that remains once your own values are "
                 f"{narrow}: {off}")
    return hint


def _frame_text(frame: Frame) -> str:
    file, line, function = frame
    return f"{file}:{line} ({function})" if function else f"{file}:{line}"


def _describe(frames: tuple[Frame, ...]) -> str:
    """Where the innermost frame is; when it is a library's, also the user's line calling it,
    or that no code of the user's is on the stack (e.g. a library run by `python -m`)."""
    if frame_of.user(frames[0][0]):
        return _frame_text(frames[0])
    library = library_of(frames[0][0])
    text = _frame_text(frames[0]) + (f" inside the library '{library}'" if library else "")
    user = next((f for f in frames if frame_of.user(f[0])), None)
    if user is None:
        return f"{text}, with no code of yours on the call stack"
    return f"{text}, called from your code at {_frame_text(user)}"


def _frames_of(location: SourceLocation) -> tuple[Frame, ...]:
    if location.frames:
        return location.frames
    if location.file is None:
        return ()
    return ((location.file, location.line or 0, location.function),)


@dataclass(frozen=True)
class Caller:
    """The user's call that is compiling a program: its frames outside jax, innermost first, and
    whether it is an eager op (a one-primitive program whose own source lines are stale)."""

    frames: tuple[Frame, ...]
    eager: bool


def _same_calls(made: tuple[Frame, ...], calling: tuple[Frame, ...]) -> bool:
    """Whether an op's frames are the compiling call's own (same files and functions, lines
    aside): the op has no line inside a traced function of the user's."""
    depth = min(len(made), len(calling))
    return [(f[0], f[2]) for f in made[:depth]] == [(f[0], f[2]) for f in calling[:depth]]


def _code(function: object) -> object:
    return getattr(inspect.unwrap(function), "__code__", None)


def compile_caller() -> Caller | None:
    """The frames of the call that is waiting for this compile, as jax's own errors name the
    user's frame: jax compiles inside the user's call, on the user's thread, while jaxlib runs
    the plugin's compile on a worker thread. None unless exactly one thread is compiling."""
    compiling, eager = _code(_internals.backend_compile_and_load), _code(
        _internals.apply_primitive)
    callers = []
    for top in sys._current_frames().values():
        stack = []
        frame = top
        while frame is not None:
            stack.append(frame)
            frame = frame.f_back
        codes = [f.f_code for f in stack]
        if compiling not in codes:
            continue
        outer = stack[codes.index(compiling) + 1:]
        frames = tuple((f.f_code.co_filename, f.f_lineno,
                        getattr(f.f_code, "co_qualname", f.f_code.co_name))
                       for f in outer if not frame_of.internal(f.f_code.co_filename)
                       and not frame_of.python_own(f.f_code.co_filename))
        if frames:
            callers.append(Caller(frames, any(f.f_code is eager for f in outer)))
    return callers[0] if len(callers) == 1 else None


def _bad_dtypes(types: tuple[TensorType, ...], target: Target) -> list[str]:
    return sorted({t.dtype for t in types if t.dtype not in target.supported_dtypes})


def _unknown_call(op: Op) -> bool:
    return (op.name == "stablehlo.custom_call"
            and op.attributes.get("call_target_name", "?") not in ALLOWED_CUSTOM_CALLS)


@dataclass(frozen=True)
class _Problem:
    text: str
    dtype: str | None  # the missing dtype, for the hint; None for a custom call
    frames: tuple[Frame, ...]  # where it was made, for the library hint


class _Checker:
    def __init__(self, program: Program, target: Target, caller: Caller | None) -> None:
        self.program = program
        self.target = target
        self.caller = caller
        # jax gives every constant the location of the whole call; the first op using it says
        # where it belongs.
        self.first_use: dict[int, Op] = {}
        for op in program.walk():
            for vid in op.operand_ids:
                self.first_use.setdefault(vid, op)

    def where(self, location: SourceLocation) -> tuple[str, tuple[Frame, ...]]:
        """' at <line>' of an op, and the frames it was made in."""
        frames = _frames_of(location)
        if self.caller is not None and frames and _same_calls(frames, self.caller.frames):
            # Made by jax's code (an eager op, jnp.sum, ...) called where the compiling call is:
            # jax reuses the first call's lowering, so the op's line is that of the first call.
            frames = self.caller.frames
        if frames:
            return f" at {_describe(frames)}", frames
        if self.caller is not None:
            return " (no source line: jax made it for the call named above)", ()
        return " at <unknown>", ()

    def argument(self, i: int, t: TensorType) -> _Problem:
        frames = self.caller.frames if self.caller else ()
        return _Problem(f"argument {i} of {self.program.name} is {t}: {self.target.version} has "
                        f"no {t.dtype}", t.dtype, frames)

    def op(self, op: Op) -> list[_Problem]:
        user = self.first_use.get(op.result_ids[0]) if op.kind == "constant" else None
        where, frames = self.where((user or op).location)
        version = self.target.version
        problems = [_Problem(f"{op.name} with {dtype}{where}: {version} has no {dtype}", dtype,
                             frames)
                    for dtype in _bad_dtypes(op.operands + op.results, self.target)]
        if _unknown_call(op):
            call = op.attributes.get("call_target_name", "?")
            problems.append(_Problem(
                f"stablehlo.custom_call @{call}{where}: no IPU implementation on {version}; "
                "express it with jax.numpy/lax ops (for linear algebra, jax_ipu lowers "
                "through JAX's HLO decompositions)", None, frames))
        return problems

    def header(self, count: int) -> str:
        head = f"{self.program.name} cannot run on {self.target.version} ({count} problem(s))"
        if self.caller is None:
            return head + ":"
        what = "the eager op at" if self.caller.eager else "compiled for the call at"
        return f"{head}, {what} {_describe(self.caller.frames)}:"

    def hints(self, problems: list[_Problem]) -> list[str]:
        lines = []
        for dtype in sorted({p.dtype for p in problems if p.dtype}):
            made = [p.frames for p in problems if p.dtype == dtype and p.frames]
            hint = _float64_hint(made, dtype) if dtype in _NARROW else _hint(dtype, self.target)
            lines.append(f"How to fix {dtype}: {hint}.")
        return lines


def check_program(program: Program, target: Target) -> None:
    """Raise IpuCompileError listing every op the target cannot run; return if all can."""
    arguments = [(i, t) for i, t in enumerate(program.inputs)
                 if t.dtype not in target.supported_dtypes]
    ops = [op for op in program.walk()
           if _bad_dtypes(op.operands + op.results, target) or _unknown_call(op)]
    if not arguments and not ops:
        return
    checker = _Checker(program, target, compile_caller())
    problems = [checker.argument(i, t) for i, t in arguments]
    for op in ops:
        problems.extend(checker.op(op))
    # One line per distinct problem: an op repeated on one line (a loop body, a constant used
    # many times) is counted, not listed again.
    counts = Counter(p.text for p in problems)
    shown = list(counts)[:MAX_REPORTED]
    lines = [checker.header(len(problems))]
    for text in shown:
        more_like = counts[text] - 1
        lines.append(f"  - {text}" + (f" (and {more_like} more like it)" if more_like else ""))
    hidden = len(problems) - sum(counts[text] for text in shown)
    if hidden:
        lines.append(f"  ... and {hidden} more")
    lines += checker.hints(problems)
    raise IpuCompileError("\n".join(lines))
