"""Host callbacks for platform "ipu": jax's CPU callback lowerings, run by the XLA:CPU numerics
(on a server, calling back the remote client's callables: remote/hostcalls.py).

Covers pure_callback, io_callback, jax.debug.print/callback and checkify's runtime check."""

from __future__ import annotations

import dataclasses
import itertools
import weakref
from collections.abc import Callable
from typing import Any

from jax_ipu import _internals as jx
from jax_ipu.compiler.lowering.tracing import Rule
from jax_ipu.errors import IpuCompileError

# The Python callables behind the host callbacks lowered for ipu, by the key their custom call
# carries as its index. jax hands a plugin only program bytes, so the numerics executable is built
# with the callables found here. Held weakly: jax keeps a program's callables until it is
# compiled, and then the numerics executable holds them for as long as it lives, as on cpu.
_HOST_CALLBACKS: weakref.WeakValueDictionary[int, Callable[..., Any]] = (
    weakref.WeakValueDictionary())
_keys = itertools.count()
# A remote client's callables, by key: held for the process's life, since the program that names
# one lives on the server, where nothing of the client's can hold it (jaxlib's proxy client takes
# no Python callables with a program).
_REMOTE_CALLBACKS: dict[int, Callable[..., Any]] = {}
# In a remote client: what makes sure its server's calls are answered (answer_remotely).
_answer_remotely: Callable[[], None] | None = None

# The custom-call targets that name a Python host callback in an ipu program.
HOST_CALLBACK_TARGETS = ("xla_ffi_python_cpu_callback",)


def host_callbacks(keys: list[int]) -> list[Callable[..., Any]]:
    """The callables behind these custom-call keys (IpuCompileError when one is gone)."""
    try:
        return [_HOST_CALLBACKS[k] for k in keys]
    except KeyError as e:
        raise IpuCompileError(
            f"host callback {e.args[0]} of this program no longer exists: compile the program "
            "again from its jax function") from None


def answer_remotely(start: Callable[[], None]) -> None:
    """Make this process a remote client's: host callbacks lower to calls the server makes back,
    which start() makes sure something here answers (remote/client.py)."""
    global _answer_remotely
    _answer_remotely = start


def remote_callback(key: int) -> Callable[..., Any] | None:
    """A remote client's callable of `key` (what a server's call names), or None."""
    return _REMOTE_CALLBACKS.get(key)


def file_callback(fn: Callable[..., Any]) -> int:
    """A new key for `fn` (held weakly: the caller keeps it alive), as a lowering files one; a
    server files its stand-ins for a client's callables so (remote/backend.py)."""
    key = next(_keys)
    _HOST_CALLBACKS[key] = fn
    return key


class _KeyedCallbacks(list):
    """A module's host-callback list whose indices are process-wide keys.

    jax's CPU callback lowering appends the callable and emits `len(list) - 1` as its index;
    here append files the callable under a new key, and len() answers that key + 1."""

    def __init__(self, module_callbacks: list[Any]) -> None:
        super().__init__()
        self.module_callbacks = module_callbacks
        self.last_key = -1

    def append(self, fn: Any) -> None:
        self.last_key = file_callback(fn)
        self.module_callbacks.append(fn)

    def __len__(self) -> int:
        return self.last_key + 1


class _RemoteCallbacks(_KeyedCallbacks):
    """The same for a remote client: the callable is kept here, not in the module's list, which
    jax would hand to jaxlib's proxy client ('Unsupported host callback type')."""

    def append(self, fn: Any) -> None:
        self.last_key = next(_keys)
        _REMOTE_CALLBACKS[self.last_key] = fn


def _as_cpu_callback(rule: Rule) -> Rule:
    """`rule` (one of JAX's callback lowerings) made to emit the CPU host-callback custom call.

    JAX admits callbacks only when lowering for cpu/cuda/rocm/tpu; the ipu program's numerics run
    on XLA:CPU, so the CPU form is the one that runs. The callable is filed under the key the
    custom call carries, and also goes into the module's own list so JAX keeps its usual
    bookkeeping (keep-alive, token threading, no fast path); in a remote client it is kept for
    the server's calls back instead (_RemoteCallbacks)."""

    def lower(ctx: Any, *args: Any, **params: Any) -> Any:
        module = ctx.module_context
        if "cpu" not in jx.backends():
            # JAX runs every callback with its inputs on a CPU device. Refused here, at compile,
            # rather than when the program runs, where a multi-device program would wait forever
            # in its next collective for the device whose callback failed.
            raise ValueError(
                "Host callbacks (jax.debug.print, jax.debug.callback, jax.pure_callback, "
                "io_callback, checkify.check with jax_experimental_unsafe_xla_runtime_errors) "
                "run on the host's CPU device, and JAX_PLATFORMS/jax_platforms leaves out cpu: "
                "list it too, e.g. JAX_PLATFORMS=ipu,cpu.")
        if _answer_remotely is not None:  # a remote client: the server calls, it answers
            _answer_remotely()  # ValueError naming what is missing
            keyed: _KeyedCallbacks = _RemoteCallbacks(module.host_callbacks)
        else:
            keyed = _KeyedCallbacks(module.host_callbacks)
        cpu_module = dataclasses.replace(module, platforms=("cpu",), backend=None,
                                         host_callbacks=keyed)
        cpu_ctx = dataclasses.replace(ctx, module_context=cpu_module)
        outs = rule(cpu_ctx, *args, **params)
        if cpu_ctx.tokens_out is not None:  # ordered effects thread their token on
            ctx.set_tokens_out(cpu_ctx.tokens_out)
        return outs

    return lower


def _check(ctx: Any, *args: Any, err_tree: Any, debug: bool) -> Any:
    """checkify's check primitive, as on cpu: nothing for a debug_check outside checkify, jax's
    "functionalize it with checkify" error for a check outside checkify, and with
    jax_experimental_unsafe_xla_runtime_errors a host callback that raises the user's message
    when the predicate fails (the model counts its host exchange like any callback's)."""
    if debug or not jx.xla_runtime_errors.value:
        return jx.check_lowering(ctx, *args, err_tree=err_tree, debug=debug)
    return _as_cpu_callback(jx.check_lowering)(ctx, *args, err_tree=err_tree, debug=debug)


def rules() -> dict[Any, Rule]:
    """The ipu rule of each primitive that calls the host (never cached: each lowering adds
    its callable to the module's list)."""
    return {
        jx.pure_callback_p: _as_cpu_callback(jx.pure_callback_lowering),
        jx.io_callback_p: _as_cpu_callback(jx.io_callback_lowering),
        jx.debug_callback_p: _as_cpu_callback(jx.debug_callback_lowering),
        jx.debug_print_p: _as_cpu_callback(jx.debug_print_lowering),
        jx.check_p: _check,
    }
