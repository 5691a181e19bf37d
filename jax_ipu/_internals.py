"""Every private JAX and jaxlib symbol jax_ipu uses, named once and checked when it is imported.

A symbol that a newer jax moved or changed gives one ImportError naming it and the supported
jax version, at plugin load, instead of an INTERNAL error deep inside a later call."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

import jax
import jaxlib

from jax_ipu.protowire import Message

SUPPORTED_JAX = "0.10.2"
_missing: list[str] = []


def _module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        _missing.append(f"module {name} ({exc})")
        return None


def _attr(module: Any, path: str, params: tuple[str, ...] = ()) -> Any:
    """`module.path`, noting it as missing (with the parameters it must accept) if absent."""
    where = getattr(module, "__name__", "?")
    value = module
    for part in path.split("."):
        value = getattr(value, part, None) if value is not None else None
    if value is None:
        _missing.append(f"{where}.{path}")
        return None
    if params:
        try:
            names = set(inspect.signature(value).parameters)
        except (TypeError, ValueError):  # a C function without a signature: name check only
            return value
        lacking = [p for p in params if p not in names]
        if lacking:
            _missing.append(f"{where}.{path} accepting {', '.join(lacking)}")
    return value


# ---- jax: plugin registration, config, lowering -------------------------------------------
_xla_bridge = _module("jax._src.xla_bridge")
_config = _module("jax._src.config")
_mlir = _module("jax._src.interpreters.mlir")
_distributed = _module("jax._src.distributed")
# The persistent compilation cache serves only platforms named inside is_cache_used.
compilation_cache = _module("jax._src.compilation_cache")

register_plugin = _attr(_xla_bridge, "register_plugin", ("plugin_name", "priority", "c_api"))
# register_plugin_profiler(c_api): jax.profiler's sessions collect the planes of the plugin's
# profiler extension. xla_bridge calls it only for plugins it loads by library path.
_lib = _module("jax._src.lib")
register_plugin_profiler = _attr(_lib, "_profiler.register_plugin_profiler")
backends = _attr(_xla_bridge, "backends")
# register_backend_initialization_hook(hook): hook(client) for every backend made, now or later.
register_backend_initialization_hook = _attr(_xla_bridge, "register_backend_initialization_hook")
# platform -> BackendRegistration (a dataclass): fail_quietly lets jax start without the backend.
backend_factories = _attr(_xla_bridge, "_backend_factories")
# Platforms whose programs jax lowers with input/output aliases for donated arguments.
platforms_with_donation: list[str] = _attr(_mlir, "_platforms_with_donation")
register_lowering = _attr(_mlir, "register_lowering", ("prim", "rule", "platform", "cacheable"))
# primitive -> entry whose .rule is jax's platform-independent lowering (where one exists).
_generic_lowerings = _attr(_mlir, "_lowerings")
lower_fun = _attr(_mlir, "lower_fun", ("fun", "multiple_results"))
# primitive -> its vmap rule (jax_ipu.tile's own primitives add theirs).
_batching = _module("jax._src.interpreters.batching")
primitive_batchers = _attr(_batching, "primitive_batchers")
bool_state = _attr(_config, "bool_state", ("name", "default", "help", "validator"))
int_state = _attr(_config, "int_state", ("name", "default", "help", "validator"))
float_state = _attr(_config, "float_state", ("name", "default", "help", "update_global_hook"))
string_or_object_state = _attr(_config, "string_or_object_state",
                               ("name", "default", "help", "validator"))
# A config option's State turns each new value into the stored one with State._parser.
_attr(_config, "State._parser")


def before_parser(state: Any, convert: Any) -> None:
    """Have jax's option `state` pass each new value through `convert` before its own parser
    (whose type check speaks first and does not name the option)."""
    original = state._parser
    state._parser = lambda value: original(convert(value))


distributed_state = _attr(_distributed, "global_state")
is_cache_used = _attr(compilation_cache, "is_cache_used", ("backend",))
# Reading and writing one entry: the ipu backend checks the cache directory around them.
get_executable_and_time = _attr(compilation_cache, "get_executable_and_time",
                                ("cache_key", "compile_options", "backend"))
put_executable_and_time = _attr(compilation_cache, "put_executable_and_time",
                                ("cache_key", "module_name", "executable", "backend"))
# jax.experimental.serialize_executable's unpickler: persistent_load(pid) loads ("exec", bytes).
_serialize_executable = _module("jax.experimental.serialize_executable")
executable_unpickler = _attr(_serialize_executable, "_JaxPjrtUnpickler")
_attr(_serialize_executable, "_JaxPjrtUnpickler.persistent_load", ("self", "pid"))

# Removes jax's own frames from a traceback, as jax.jit's boundary does (traceback_util).
_traceback_util = _module("jax._src.traceback_util")
filter_traceback = _attr(_traceback_util, "filter_traceback", ("tb",))
traceback_filtering_mode = _attr(_traceback_util, "_filtering_mode")

# ---- jax: primitives whose only lowerings are per platform ----------------------------------
_linalg = _module("jax._src.lax.linalg")
_tpu_eigh = _module("jax._src.tpu.linalg.eigh")
_threefry = _module("jax._src.random")
_callback = _module("jax._src.callback")
_checkify = _module("jax._src.checkify")
_ann = _module("jax._src.lax.ann")
_debugging = _module("jax._src.debugging")

cholesky_p = _attr(_linalg, "cholesky_p")
triangular_solve_p = _attr(_linalg, "triangular_solve_p")
geqrf_p = _attr(_linalg, "geqrf_p")
householder_product_p = _attr(_linalg, "householder_product_p")
eigh_p = _attr(_linalg, "eigh_p")
hessenberg_p = _attr(_linalg, "hessenberg_p")
tridiagonal_p = _attr(_linalg, "tridiagonal_p")
eig_p = _attr(_linalg, "eig_p")
schur_p = _attr(_linalg, "schur_p")
# Primitives with a platform-independent rule in jax (a jax function traced into HLO).
lu_p = _attr(_linalg, "lu_p")
lu_pivots_to_permutation_p = _attr(_linalg, "lu_pivots_to_permutation_p")
qr_p = _attr(_linalg, "qr_p")
ormqr_p = _attr(_linalg, "ormqr_p")
svd_p = _attr(_linalg, "svd_p")
tridiagonal_solve_p = _attr(_linalg, "tridiagonal_solve_p")
cholesky_update_p = _attr(_linalg, "cholesky_update_p")
symmetric_product_p = _attr(_linalg, "symmetric_product_p")
EighImplementation = _attr(_linalg, "EighImplementation")
eigh_qdwh = _attr(_tpu_eigh, "_eigh_qdwh_impl", ("x", "lower", "sort_eigenvalues"))
threefry2x32_p = _attr(_threefry, "threefry2x32.threefry2x32_p")
threefry2x32_cpu_lowering = _attr(_threefry, "threefry2x32._threefry2x32_cpu_lowering_rule")
pure_callback_p = _attr(_callback, "pure_callback_p")
io_callback_p = _attr(_callback, "io_callback_p")
pure_callback_lowering = _attr(_callback, "pure_callback_lowering")
io_callback_lowering = _attr(_callback, "io_callback_lowering")
debug_callback_p = _attr(_debugging, "debug_callback_p")
debug_callback_lowering = _attr(_debugging, "debug_callback_lowering")
debug_print_p = _attr(_debugging, "debug_print_p")
debug_print_lowering = _attr(_debugging, "debug_print_lowering_rule")
approx_top_k_p = _attr(_ann, "approx_top_k_p")
check_p = _attr(_checkify, "check_p")
check_lowering = _attr(_checkify, "check_lowering_rule", ("ctx", "err_tree", "debug"))
# jax_experimental_unsafe_xla_runtime_errors: checkify.check lowers to a host callback.
xla_runtime_errors = _attr(_config, "xla_runtime_errors")

# ---- jax: memory kinds inside programs -------------------------------------------------------
# device_put to another memory kind inside jit (and remat's offloading) lowers to an
# annotate_device_placement custom call only by this rule, which jax registers for tpu and gpu;
# its cpu rule drops the move.
_dispatch = _module("jax._src.dispatch")
device_put_p = _attr(_dispatch, "device_put_p")
device_put_memory_kind_lowering = _attr(_dispatch, "_tpu_gpu_device_put_lowering",
                                        ("ctx", "devices", "srcs", "copy_semantics"))

# ---- jax: the frames of a compile request, to name the user's call when a program is refused --
_compiler = _module("jax._src.compiler")

# jax compiles every program inside this function, on the thread of the user's call.
backend_compile_and_load = _attr(_compiler, "backend_compile_and_load")
# Every compile goes through this function, which pxla looks up at each call.
_attr(_compiler, "compile_or_get_cached", ("backend", "computation", "devices",
                                           "compile_options", "host_callbacks"))


def wrap_compile(wrap: Wrap) -> None:
    """Have every compile jax asks for go through wrap(jax's own) (once)."""
    _compiler.compile_or_get_cached = _wrapped_once(_compiler.compile_or_get_cached, wrap)


# handler(JaxRuntimeError) -> exception to raise instead, or None; asked by that function.
register_xla_runtime_error_handler = _attr(_compiler, "register_xla_runtime_error_handler",
                                           ("handler_fn",))
# Eager ops run as one-primitive programs through this function (their lowering is cached, so
# the source lines inside such a program are those of the op's first use).
apply_primitive = _attr(_dispatch, "apply_primitive")

# ---- jax: its C++ dispatch of a compiled program, reused to run the numerics executables ------
_pxla = _module("jax._src.interpreters.pxla")
_tree_util = _module("jax._src.tree_util")

# _jax.pjit(name, fun, cache_miss, static_argnums, static_argnames, global_cache_keys,
# pytree_registry, shard_arg_fallback): cache_miss(*args) -> (outs, fastpath data, executed).
MeshExecutableFastpathData = _attr(_pxla, "MeshExecutableFastpathData")
JitGlobalCppCacheKeys = _attr(_pxla, "JitGlobalCppCacheKeys")
cc_shard_arg = _attr(_pxla, "cc_shard_arg", ("x", "sharding", "layout"))
# jax's one Python path from host values to devices: device_put, jit's, pmap's and eager ops'
# numpy arguments and make_array_from_callback all call it through the module.
_attr(_pxla, "batched_device_put", ("aval", "sharding", "xs", "devices"))
# How each type of value moves to a sharding (device_put with a sharding), by type; and the
# function that dispatches a list of values through that table.
shard_arg_handlers = _attr(_pxla, "shard_arg_handlers")
shard_args = _attr(_pxla, "shard_args", ("shardings", "layouts", "copy_semantics", "args"))
dispatch_registry = _attr(_tree_util, "dispatch_registry")

# ---- jaxlib: the private XLA:CPU client that runs the numerics -------------------------------
_jax = _module("jaxlib._jax")
_xla_client = _module("jaxlib.xla_client")
_mlir_ext = _module("jaxlib.mlir._mlir_libs._jax_mlir_ext")

pjit = _attr(_jax, "pjit")  # see the section above
get_tfrt_cpu_client = _attr(_jax, "get_tfrt_cpu_client")
batched_device_put = _attr(_jax, "batched_device_put")
HostBufferSemantics = _attr(_jax, "HostBufferSemantics")
# jax's Array type; made with _skip_checks=True to join per-device shards without a copy.
ArrayImpl = _attr(_jax, "ArrayImpl")
# Makes the ArrayImpl of one output of execute_sharded in C++ (what jax's own dispatch uses).
array_result_handler = _attr(_jax, "array_result_handler")
get_distributed_runtime_client = _attr(_jax, "get_distributed_runtime_client")
get_distributed_runtime_service = _attr(_jax, "get_distributed_runtime_service")
make_gloo_tcp_collectives = _attr(_jax, "make_gloo_tcp_collectives")
CompileOptions = _attr(_xla_client, "CompileOptions")
DeviceAssignment = _attr(_xla_client, "DeviceAssignment")
DeviceList = _attr(_xla_client, "DeviceList")
PrimitiveType = _attr(_xla_client, "PrimitiveType")  # XLA's element types, in HloModuleProtos
register_mlir_dialects = _attr(_mlir_ext, "register_dialects")


# ---- jax and jaxlib: the remote IPU Model (jax_ipu/remote) ----------------------------------
_sharding_impls = _module("jax._src.sharding_impls")
# A sharding given by devices and an xla.OpSharding: what the server makes of an IFRT HloSharding.
GSPMDSharding = _attr(_sharding_impls, "GSPMDSharding")
_to_hlo = _attr(_sharding_impls, "GSPMDSharding._to_xla_hlo_sharding", ("num_dimensions",))
OpSharding = _attr(_xla_client, "OpSharding")


Wrap = Callable[[Callable[..., Any]], Callable[..., Any]]


def wrap_batched_device_put(wrap: Wrap) -> None:
    """Have every host-to-device transfer jax makes go through wrap(jax's own) (once)."""
    wrapped = _wrapped_once(_pxla.batched_device_put, wrap)
    _pxla.batched_device_put = wrapped


# jax's Array starts a read-back to the host (copy_to_host_async: jax.device_get does it for
# every leaf first) and finishes it, keeping the bytes on the Array (_value, as np.asarray does).
_attr(_jax, "ArrayImpl.copy_to_host_async")
_attr(_jax, "ArrayImpl._value")


def wrap_copy_to_host_async(wrap: Wrap) -> None:
    """Have every read-back jax starts go through wrap(jax's own) (once)."""
    ArrayImpl.copy_to_host_async = _wrapped_once(ArrayImpl.copy_to_host_async, wrap)


def read_back(array: Any) -> Any:
    """Finish the read-back of a jax Array, keeping its bytes on it; the numpy array."""
    return array._value


# jaxlib's C++ members of an Array that read its buffers without asking whether it was deleted:
# after x.delete() each one crashes the process (measured on jaxlib 0.10.2, cpu and ipu, local
# and remote; a donated Array raises instead). _check_if_deleted raises jax's own error.
_UNCHECKED_METHODS = ("is_ready", "clone", "platform")
_UNCHECKED_PROPERTIES = ("_pjrt_layout",)
for _member in (*_UNCHECKED_METHODS, *_UNCHECKED_PROPERTIES, "_check_if_deleted"):
    _attr(_jax, f"ArrayImpl.{_member}")
# jaxlib's own is_ready, unguarded: the plugin's execute asks it of outputs it has just made
# (about 0.5 us a call less than through the guard).
array_is_ready = _attr(_jax, "ArrayImpl.is_ready")


def guard_deleted_arrays() -> None:
    """Have the Array members that crash the process on a deleted Array raise jax's error
    ("Array has been deleted") instead, on every platform (once)."""

    def guard(name: str) -> Wrap:
        def guarded(original: Callable[..., Any]) -> Callable[..., Any]:
            def member(self: Any, *args: Any, **kwargs: Any) -> Any:
                self._check_if_deleted()
                return original(self, *args, **kwargs)

            member.__name__ = member.__qualname__ = name  # nanobind's own names are empty
            member.__doc__ = original.__doc__
            return member

        return guarded

    for name in _UNCHECKED_METHODS:
        setattr(ArrayImpl, name, _wrapped_once(getattr(ArrayImpl, name), guard(name)))
    for name in _UNCHECKED_PROPERTIES:
        prop = ArrayImpl.__dict__[name]
        if not getattr(prop.fget, "_jax_ipu_wrapped", False):
            setattr(ArrayImpl, name, property(_wrapped_once(prop.fget, guard(name)),
                                              doc=prop.__doc__))


# What jax.block_until_ready calls for several Arrays at once.
_attr(_xla_client, "batched_block_until_ready")


def guard_array_waits(check: Callable[[Any], None]) -> None:
    """Have every wait for an Array (np.asarray, float(), printing, block_until_ready, one or
    several) call check(array) first, which may raise instead (once)."""

    def value(original: Callable[..., Any]) -> Callable[..., Any]:
        def _value(self: Any) -> Any:
            if self._npy_value is None:  # read before: no wait
                check(self)
            return original(self)

        return _value

    def block(original: Callable[..., Any]) -> Callable[..., Any]:
        def block_until_ready(self: Any) -> Any:
            check(self)
            return original(self)

        return block_until_ready

    def batched(original: Callable[..., Any]) -> Callable[..., Any]:
        def batched_block_until_ready(arrays: Any) -> Any:
            for array in arrays:
                check(array)
            return original(arrays)

        return batched

    prop = ArrayImpl.__dict__["_value"]
    if not getattr(prop.fget, "_jax_ipu_wrapped", False):
        ArrayImpl._value = property(_wrapped_once(prop.fget, value), doc=prop.__doc__)
    ArrayImpl.block_until_ready = _wrapped_once(ArrayImpl.block_until_ready, block)
    _xla_client.batched_block_until_ready = _wrapped_once(
        _xla_client.batched_block_until_ready, batched)


def wrap_shard_arg_handler(kind: type, wrap: Wrap) -> None:
    """Have jax move values of type `kind` to shardings with wrap(jax's own handler) (once)."""
    shard_arg_handlers[kind] = _wrapped_once(shard_arg_handlers[kind], wrap)


def _wrapped_once(original: Callable[..., Any], wrap: Wrap) -> Callable[..., Any]:
    if getattr(original, "_jax_ipu_wrapped", False):
        return original
    wrapped = wrap(original)
    wrapped._jax_ipu_wrapped = True  # type: ignore[attr-defined]
    return wrapped


def hlo_sharding(sharding: Any, num_dimensions: int) -> Any:
    """The xla HloSharding of a jax sharding for an array of `num_dimensions`."""
    return sharding._to_xla_hlo_sharding(num_dimensions)


# The devices a jax sharding's layout names, in its order (device i holds what its HloSharding
# gives tile i).
_attr(_sharding_impls, "GSPMDSharding._device_assignment")


def device_assignment(sharding: Any) -> tuple[Any, ...]:
    return tuple(sharding._device_assignment)


# The xla.Layout (minor_to_major, tiles) of a jaxlib PjRtLayout: what the IFRT proxy carries.
_attr(_jax, "PjRtLayout._xla_layout")


def xla_layout(layout: Any) -> Any:
    """The xla Layout inside a jaxlib PjRtLayout."""
    return layout._xla_layout()


# ---- jaxlib: a DeviceAssignment is only readable serialized (DeviceAssignmentProto) ---------
def device_assignment_columns(assignment: Any) -> list[list[int]]:
    """Device ids of a jaxlib DeviceAssignment, one list of replica devices per partition.

    DeviceAssignmentProto: field 3 (computation_devices) per partition, each holding field 1
    (replica_device_ids, packed)."""
    return [column.integers(1) for column in Message(assignment.serialize()).messages(3)]


def _check_device_assignment() -> None:
    if DeviceAssignment is None:
        return
    import numpy as np

    try:
        columns = device_assignment_columns(DeviceAssignment.create(np.array([[0, 1], [2, 3]])))
    except Exception as exc:  # noqa: BLE001 - any failure means the format changed
        columns = [[f"{exc}"]]
    if columns != [[0, 2], [1, 3]]:
        _missing.append(f"the DeviceAssignmentProto layout (read {columns})")


def _check_fastpath_fields() -> None:
    fields = getattr(MeshExecutableFastpathData, "_fields", ())
    if fields and fields != FASTPATH_FIELDS:
        _missing.append(f"MeshExecutableFastpathData with fields {FASTPATH_FIELDS} (has {fields})")


FASTPATH_FIELDS = ("xla_executable", "out_pytree_def", "in_shardings", "out_shardings",
                   "out_avals", "out_committed", "kept_var_bitvec", "in_device_local_layouts",
                   "const_args")
_check_fastpath_fields()


_check_device_assignment()


def generic_lowering(prim: Any) -> Any:
    """jax's platform-independent lowering rule of `prim`."""
    return _generic_lowerings[prim].rule


def _check_generic_lowerings() -> None:
    for prim in (lu_p, lu_pivots_to_permutation_p, qr_p, ormqr_p, svd_p, tridiagonal_solve_p,
                 cholesky_update_p, symmetric_product_p):
        if _generic_lowerings is None or prim is None:
            return
        if not callable(getattr(_generic_lowerings.get(prim), "rule", None)):
            _missing.append(f"jax's platform-independent lowering of {prim}")


_check_generic_lowerings()


def check() -> None:
    """Raise one ImportError listing every private symbol this jax lacks (none: return)."""
    if _missing:
        raise ImportError(
            f"jax {jax.__version__} / jaxlib {jaxlib.__version__} lacks or changed private "
            f"symbols jax-ipu builds on: {'; '.join(_missing)}. jax-ipu supports jax and jaxlib "
            f"{SUPPORTED_JAX}: pip install 'jax=={SUPPORTED_JAX}' 'jaxlib=={SUPPORTED_JAX}'."
        )


def missing() -> list[str]:
    """What check() would report (for tests and `python -m jax_ipu info`)."""
    return list(_missing)

