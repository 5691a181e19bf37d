"""initialize(): registers the ipu platform with JAX (the JAX internals it uses are _internals').

JAX calls it through the `jax_plugins` entry point; it checks versions, registers the config
flags, the PJRT table, donation support and the lowering rules for platform "ipu"."""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jaxlib

from jax_ipu import _internals, config, signposts

logger = logging.getLogger(__name__)

PLATFORM = "ipu"
JAXLIB_SERIES = "0.10."  # the jaxlib whose PJRT C API (0.112) the table speaks
_initialized = False


def check_versions(jaxlib_version: str = jaxlib.__version__) -> None:
    """Refuse, with one clear error, a jaxlib whose PJRT C API the plugin does not speak."""
    if not jaxlib_version.startswith(JAXLIB_SERIES):
        raise ImportError(
            f"jax-ipu speaks the PJRT C API of jaxlib {JAXLIB_SERIES}x (API 0.112) but jaxlib "
            f"{jaxlib_version} is installed. Install the pinned versions: "
            f"pip install 'jax=={JAXLIB_SERIES}2' 'jaxlib=={JAXLIB_SERIES}2'."
        )


def register_flags() -> None:
    """Make every jax_ipu flag a jax.config option (idempotent; `import jax_ipu` calls it)."""
    for flag in config.FLAGS:
        if flag.name in jax.config.values:
            continue
        try:
            default = config.env_value(flag)
        except config.IpuConfigError as error:
            # A bad JAX_IPU_* value must not break jax for cpu users: it is raised when the ipu
            # backend starts, and jax must not parse it meanwhile (it would raise here).
            config.ENV_ERRORS[flag.name] = error
            default = flag.default

        def validate(value: object, flag: config.Flag = flag) -> None:
            flag.parse(value)
            _refuse_late_change(flag.name)

        # jax must not parse the variable: its parser differs from the flag's (" 1 " is refused,
        # and a bad value would raise here), and `default` already holds what it says.
        with config.hidden_env(flag.env_var):
            if flag.kind is bool:
                _internals.bool_state(flag.name, default, flag.help, validator=validate)
            elif flag.kind is int:
                state = _internals.int_state(flag.name, default, flag.help, validator=validate)
                _internals.before_parser(state, functools.partial(_typed, flag))
            elif flag.kind is float:  # no validator here: the hook checks after jax set it
                state = _internals.float_state(flag.name, default, flag.help,
                                               update_global_hook=validate,
                                               update_thread_local_hook=lambda v,
                                               check=validate: v is None or check(v))
                _internals.before_parser(state, functools.partial(_typed, flag))
            else:  # not enum_state: its own check would speak first, without naming the flag
                _internals.string_or_object_state(flag.name, default, flag.help,
                                                  validator=validate)


def _typed(flag: config.Flag, value: object) -> object:
    """`value` as the flag's type when it reads as one ("64" for an int flag), else the flag's
    own error, which names it (jax's type check would speak first, without the name)."""
    if value is None or isinstance(value, flag.kind) and not isinstance(value, bool):
        return value
    return flag.parse(value)


def _refuse_late_change(name: str) -> None:
    # No client exists before the runtime is imported. Importing it here, when each default is
    # validated at registration, would add 0.2 s (the compiler and the model) to `import jax_ipu`.
    runtime = sys.modules.get("jax_ipu.runtime.client")
    if config.BY_NAME[name].read_on_use:
        return
    if runtime is not None and runtime.live_clients():
        raise config.IpuConfigError(
            f"{name} is read when the ipu backend starts, and it has started already: set it "
            "before the first use of jax (or with its environment variable "
            f"{config.BY_NAME[name].env_var})."
        )


@dataclass(frozen=True)
class DistributedState:
    """What `jax.distributed.initialize` set up in this process, as the ipu client needs it."""

    client: Any  # jaxlib's DistributedRuntimeClient, connected to jax's coordination service
    process_index: int
    num_processes: int
    coordinator_address: str


def distributed_state() -> DistributedState | None:
    """This process's place in a multi-process run, or None when jax.distributed is not used."""
    state = _internals.distributed_state
    if state.client is None:
        return None
    return DistributedState(state.client, state.process_id, state.num_processes,
                            state.coordinator_address)


class _AsCachedPlatform:
    """An ipu backend as jax's compilation-cache check sees it: a platform it serves."""

    platform = "cpu"

    def __init__(self, backend: Any) -> None:
        self._backend = backend

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)


def use_compilation_cache() -> None:
    """Let jax's persistent compilation cache hold ipu programs (idempotent).

    jax decides once per process whether the cache is used, by the platform of the first
    backend that compiles, from a list inside is_cache_used; an ipu backend asking first would
    turn the cache off for cpu programs too."""
    cache = _internals.compilation_cache
    original = cache.is_cache_used
    if getattr(original, "jax_ipu", False):
        return

    def is_cache_used(backend: Any) -> bool:
        if getattr(backend, "platform", None) == PLATFORM:
            backend = _AsCachedPlatform(backend)
        return original(backend)

    is_cache_used.jax_ipu = True  # type: ignore[attr-defined]
    cache.is_cache_used = is_cache_used
    cache.get_executable_and_time = _in_trusted_cache(_internals.get_executable_and_time, 2)
    cache.put_executable_and_time = _in_trusted_cache(_internals.put_executable_and_time, 3)
    _check_deserialized_executables()


def check_cache_directory() -> None:
    """Refuse jax's compilation-cache directory when another user could write into it (or it is
    not this user's): an entry planted there would be loaded as this user's program. A remote
    cache (gs://...) and a directory not made yet are left to jax."""
    from jax_ipu import sealing

    where = str(jax.config.jax_compilation_cache_dir or "")
    if where and "://" not in where and Path(where).expanduser().exists():
        sealing.check_directory(Path(where).expanduser(), "jax_compilation_cache_dir")


def _in_trusted_cache(original: Callable[..., Any], at: int) -> Callable[..., Any]:
    """`original` (whose backend is positional argument `at`), after check_cache_directory when
    the backend is ipu: jax turns the error into one warning per entry and compiles afresh."""

    @functools.wraps(original)
    def checked(*args: Any, **kwargs: Any) -> Any:
        backend = args[at] if len(args) > at else kwargs.get("backend")
        if getattr(backend, "platform", None) != PLATFORM:
            return original(*args, **kwargs)
        check_cache_directory()
        found = original(*args, **kwargs)
        if original.__name__.startswith("get") and found[0] is not None:
            from jax_ipu.runtime import client

            client.check_loaded(found[0])
        return found

    return checked


def _check_deserialized_executables() -> None:
    """Check what serialize_executable.deserialize_and_load loads on ipu as the cache's reads
    are (client.check_loaded): its pickle hands each executable to persistent_load."""
    unpickler = _internals.executable_unpickler
    original = unpickler.persistent_load
    if getattr(original, "jax_ipu", False):
        return

    def persistent_load(self: Any, pid: Any) -> Any:
        found = original(self, pid)
        if pid[0] == "exec" and getattr(self.backend, "platform", None) == PLATFORM:
            from jax_ipu.runtime import client

            client.check_loaded(found)
        return found

    persistent_load.jax_ipu = True  # type: ignore[attr-defined]
    unpickler.persistent_load = persistent_load


def _spare_other_backends() -> None:
    """When a JAX_IPU_* or Poplar variable holds a bad value and the user did not ask for ipu
    by name (JAX_PLATFORMS), warn once, naming it, and let jax start its other backends without
    ipu (jax.devices("ipu") still raises the error); else jax would refuse to start cpu too."""
    if (jax.config.jax_platforms or "").strip():
        return  # jax starts only the platforms named, and fails loudly for those
    problem = config.environment_problem()
    if problem is None:
        return
    logger.warning("jax-ipu: the ipu backend is off in this process: %s Other backends (cpu) "
                   "work; fix the variable to use ipu.", problem)
    factories = _internals.backend_factories
    factories[PLATFORM] = dataclasses.replace(factories[PLATFORM], fail_quietly=True)


def _keep_to_the_end(client: Any) -> None:
    """One reference to each ipu client jax makes, never released. np.asarray of an ipu array
    is a view of its buffer (as for cpu arrays), and jaxlib's view holds a raw pointer to the
    client, which it reads when the view is freed: a view freed after jax freed the client (one
    in a module's globals at exit, or one kept across jax.extend.backend.clear_backends())
    crashed the process. A client cleared away is then kept until the process ends. Not in a
    multi-process run: there the client must go at exit, before the coordination service stops,
    or its XLA:CPU client's task watcher logs gRPC errors (such a run keeps the rare crash)."""
    if client.platform != PLATFORM or jax.config.jax_debug_leaked_clients_on_clear_backends:
        return  # that flag asks jax to check that clear_backends frees every client
    if len({d.process_index for d in client.devices()}) > 1:
        return
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(client))


EAGER_OP = "the eager op at"  # how compiler/checks.py names a program jax made for one op


def _filter_eager_refusals() -> None:
    """Print an uncaught refusal of an eager op (jnp.ones(4, dtype=jnp.bfloat16)) without jax's
    internal frames, as jax prints one from a jitted call: jax's boundary filters only the frames
    below the op's own jit, so about 30 lines of jnp and lax frames came first."""
    original = sys.excepthook
    if getattr(original, "jax_ipu", False):
        return

    def excepthook(kind: type[BaseException], error: BaseException, tb: Any) -> None:
        if tb is not None and EAGER_OP in str(error) and \
                _internals.traceback_filtering_mode() != "off":
            tb = _internals.filter_traceback(tb)
            error.with_traceback(tb)  # what Python prints, whatever the hook is passed
        original(kind, error, tb)

    excepthook.jax_ipu = True  # type: ignore[attr-defined]
    sys.excepthook = excepthook


def initialize() -> None:
    """Register the ipu platform (called by JAX at start-up, once)."""
    global _initialized
    if _initialized:
        return
    check_versions()
    _internals.check()
    from jax_ipu.compiler import lowering

    if PLATFORM not in _internals.platforms_with_donation:
        _internals.platforms_with_donation.append(PLATFORM)
    # Never a crash: a member of a deleted Array that would crash the process (a remote
    # session's server too) raises jax's error.
    _internals.guard_deleted_arrays()
    if config.value("jax_ipu_remote").strip():
        # A remote IPU Model: jaxlib's IFRT proxy client, and no local one.
        from jax_ipu.remote import client as remote

        remote.register(PLATFORM, priority=400)
    else:
        from jax_ipu.pjrt import slots

        use_compilation_cache()
        signposts.install()
        _filter_eager_refusals()
        c_api = slots.install(distributed_state)
        _internals.register_plugin(PLATFORM, priority=400, c_api=c_api)
        _spare_other_backends()
        _internals.register_backend_initialization_hook(_keep_to_the_end)
        # jax.profiler's traces then hold the IPUs' planes (the table's profiler extension).
        _internals.register_plugin_profiler(c_api)
    lowering.register(PLATFORM)
    # Moves between memory kinds inside programs (Streaming Memory), as on tpu and gpu.
    _internals.register_lowering(_internals.device_put_p,
                                 _internals.device_put_memory_kind_lowering, platform=PLATFORM)
    _initialized = True
