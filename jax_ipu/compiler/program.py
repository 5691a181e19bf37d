"""Read a StableHLO module (portable artifact, MLIR bytecode or text) into the model's IR.

Uses jaxlib's own MLIR bindings; func.call callees and composites' decompositions are inlined."""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from collections import ChainMap
from collections.abc import Iterator
from typing import Any

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import chlo, mhlo, sdy, stablehlo

from jax_ipu import _internals
from jax_ipu.compiler import frames as frame_of
from jax_ipu.dtypes import BY_MLIR
from jax_ipu.errors import IpuCompileError
from jax_ipu.model.ir import Op, Program, Region, SourceLocation, TensorType

logger = logging.getLogger(__name__)

_PORTABLE_MAGIC = b"ML\xefR"


# stablehlo attributes the bindings expose as classes: (class, fields to copy)
_STABLEHLO_ATTRS = (
    (stablehlo.DotDimensionNumbers, ("lhs_batching_dimensions", "rhs_batching_dimensions",
                                     "lhs_contracting_dimensions",
                                     "rhs_contracting_dimensions")),
    (stablehlo.ConvDimensionNumbers, ("input_batch_dimension", "input_feature_dimension",
                                      "input_spatial_dimensions",
                                      "kernel_input_feature_dimension",
                                      "kernel_output_feature_dimension",
                                      "kernel_spatial_dimensions", "output_batch_dimension",
                                      "output_feature_dimension",
                                      "output_spatial_dimensions")),
    (stablehlo.GatherDimensionNumbers, ("offset_dims", "collapsed_slice_dims",
                                        "operand_batching_dims", "start_indices_batching_dims",
                                        "start_index_map", "index_vector_dim")),
    (stablehlo.ScatterDimensionNumbers, ("update_window_dims", "inserted_window_dims",
                                         "input_batching_dims",
                                         "scatter_indices_batching_dims",
                                         "scattered_dims_to_operand_dims", "index_vector_dim")),
)
_STABLEHLO_ENUMS = (stablehlo.ComparisonDirectionAttr, stablehlo.ComparisonTypeAttr,
                    stablehlo.PrecisionAttr, stablehlo.FftTypeAttr, stablehlo.TransposeAttr,
                    stablehlo.RngDistributionAttr, stablehlo.RngAlgorithmAttr)
_MAX_ATTR_TEXT = 200
# Ops that stand for a function of the module, read as that function's body: calls, and
# composites (e.g. chlo.top_k), whose decomposition is what they compute.
_CALLEE_ATTR = {"func.call": "callee", "stablehlo.composite": "decomposition"}
# Composites of tile-level programs (jax_ipu.tile) are kept as one op each: their attributes say
# which tiles hold and run what, and the model costs that placement (never the decomposition).
TILE_COMPOSITE_PREFIX = "jax_ipu.tile_"
# Composites of library routines (lowering/linalg.py: Cholesky, triangular solve, QR) are kept
# as one op each too: the model costs the routine Poplar would call (never the decomposition).
LIBRARY_COMPOSITE_PREFIX = "jax_ipu.linalg_"
# Integer tensors up to this many elements are followed as known values (index vectors).
_MAX_KNOWN_INTS = 64
# Where an indexed op's start indices begin among its operands (scatter and gather: see
# _Reader.note_known_ints).
_FIRST_INDEX = {"dynamic_slice": 1, "dynamic_update_slice": 2}
# Device-id tables the collectives model reads whole: kept at any size, splats expanded.
_DEVICE_ID_ATTRS = frozenset({"replica_groups", "source_target_pairs"})


def _context() -> ir.Context:
    ctx = ir.Context()
    # func, arith and the other upstream dialects JAX itself registers, for MLIR text input.
    # Every dialect loads when a program first uses it: loading them all up front cost most of
    # a small program's read.
    registry = ir.DialectRegistry()
    _internals.register_mlir_dialects(registry)
    ctx.append_dialect_registry(registry)
    stablehlo.register_dialect(ctx, load=False)
    chlo.register_dialect(ctx, load=False)
    sdy.register_dialect(ctx, load=False)
    mhlo.register_mhlo_dialect(ctx, load=False)
    # Modules may carry dialects we do not register (e.g. mhlo attributes): keep them opaque.
    ctx.allow_unregistered_dialects = True
    return ctx


class _Lent:
    """A context a compile borrows, with the bytes of programs it has read so far."""

    def __init__(self) -> None:
        self.context = _context()
        self.read = 0


# Contexts free to lend. A compile reuses one (its dialects load once, not per program), alone
# while it holds it: XLA:CPU compiles the module in it without the GIL. A context keeps every
# type and constant it has read, so it retires after _RETIRE_BYTES of programs.
_FREE: list[_Lent] = []
_FREE_LOCK = threading.Lock()
_RETIRE_BYTES = 64 << 20


@contextlib.contextmanager
def lent_context(nbytes: int) -> Iterator[ir.Context]:
    """An MLIR context for one compile of a program of `nbytes`, reused by later compiles."""
    with _FREE_LOCK:
        lent = _FREE.pop() if _FREE else _Lent()
    try:
        yield lent.context
    finally:
        lent.read += nbytes
        if lent.read < _RETIRE_BYTES:
            with _FREE_LOCK:
                _FREE.append(lent)


def _parse_module(code: bytes | str, ctx: ir.Context) -> ir.Module:
    if isinstance(code, str):
        code = code.encode()
    if code.startswith(_PORTABLE_MAGIC) and b"StableHLO_v" in code[:32]:
        return stablehlo.deserialize_portable_artifact(ctx, code)
    return ir.Module.parse(code, ctx)


def verifies(code: bytes) -> bool:
    """Whether `code` parses into a module that passes MLIR's verifier."""
    try:
        return _parse_module(code, _context()).operation.verify()
    except ir.MLIRError:
        return False


def tensor_type(t: ir.Type) -> TensorType:
    """The model's TensorType for an MLIR type (non-tensor types become shapeless)."""
    if isinstance(t, ir.RankedTensorType):
        shape = tuple(-1 if ir.ShapedType.is_dynamic_size(d) else d for d in t.shape)
        elem = str(t.element_type)
    else:
        shape, elem = (), str(t)
    found = BY_MLIR.get(elem)
    return TensorType(shape, elem if found is None else found.name)


def _attr_to_py(attr: ir.Attribute) -> Any:
    for cls, fields in _STABLEHLO_ATTRS:
        if cls.isinstance(attr):
            typed = cls(attr)
            return {f: getattr(typed, f) for f in fields}
    for cls in _STABLEHLO_ENUMS:
        if cls.isinstance(attr):
            return cls(attr).value
    if isinstance(attr, ir.BoolAttr | ir.IntegerAttr | ir.FloatAttr | ir.StringAttr
                  | ir.FlatSymbolRefAttr):
        return attr.value
    if isinstance(attr, ir.DenseI64ArrayAttr | ir.DenseI32ArrayAttr | ir.DenseBoolArrayAttr):
        return list(attr)
    if isinstance(attr, ir.ArrayAttr):
        return [_attr_to_py(a) for a in attr]
    if isinstance(attr, ir.DictAttr):
        return {a.name: _attr_to_py(a.attr) for a in attr}
    if isinstance(attr, ir.DenseElementsAttr):
        return _dense_to_py(attr)
    text = str(attr)
    return text if len(text) <= _MAX_ATTR_TEXT else text[:_MAX_ATTR_TEXT] + "..."


def _dense_to_py(attr: ir.DenseElementsAttr) -> Any:
    """Scalars and splats as a Python number; small arrays as nested lists; big ones as None."""
    if attr.is_splat:
        return _attr_to_py(attr.get_splat_value())
    if ir.ShapedType(attr.type).rank and len(attr) <= 64:
        try:
            return np.array(attr).tolist()
        except (TypeError, ValueError, RuntimeError):
            return None
    return None


def _frames(loc: ir.Location) -> tuple[str | None, list[tuple[str, int, str | None]]]:
    """(name-stack scope, frames innermost first) of a jax location."""
    scope: str | None = None
    frames: list[tuple[str, int, str | None]] = []

    def visit(loc: ir.Location) -> None:
        nonlocal scope
        if isinstance(loc, ir.NameLoc):
            child = loc.child_loc
            if isinstance(child, ir.FileLineColLoc):
                frames.append((child.filename, child.start_line, loc.name_str))
                return
            if scope is None and not loc.name_str.endswith(":"):
                scope = loc.name_str
            visit(child)
        elif isinstance(loc, ir.CallSiteLoc):
            visit(loc.callee)
            visit(loc.caller)
        elif isinstance(loc, ir.FileLineColLoc):
            frames.append((loc.filename, loc.start_line, None))
        elif isinstance(loc, ir.FusedLoc):
            for sub in loc.locations:
                visit(sub)

    visit(loc)
    return scope, frames


def source_location(loc: ir.Location) -> SourceLocation:
    """The SourceLocation of an MLIR location (see frames.location)."""
    return frame_of.location(*_frames(loc))


def _axis_sizes(mesh: ir.Attribute) -> dict[str, int]:
    return {a.name: a.size for a in map(sdy.MeshAxisAttr, sdy.MeshAttr(mesh).axes)}


def _shards(attr: ir.Attribute, meshes: dict[str, dict[str, int]], rank: int
            ) -> tuple[int, ...] | None:
    """Number of shards of each dimension under an sdy sharding; None when unreadable."""
    try:
        sharding = sdy.TensorShardingAttr(attr)
        ref = sharding.mesh_or_ref
        sizes = meshes.get(ref.value) if isinstance(ref, ir.FlatSymbolRefAttr) else \
            _axis_sizes(ref)
        dims = [sdy.DimensionShardingAttr(d).axes for d in sharding.dimension_shardings]
        if sizes is None or len(dims) not in (0, rank):
            return None
        axes = [[sdy.AxisRefAttr(a) for a in d] for d in dims]
        # A sub-axis ("i":(1)2) has its own size; a maximal sharding (no dimensions) puts the
        # whole tensor on one device.
        return tuple(math.prod(sdy.SubAxisInfoAttr(a.sub_axis_info).size if a.sub_axis_info
                               else sizes[a.name] for a in d) for d in axes) or (1,) * rank
    except Exception:  # an unexpected sharding must never stop us: the value counts whole
        logger.debug("unreadable sharding %s", attr, exc_info=True)
        return None


class _Reader:
    """Walks one module, numbering values, inlining private calls, noting shardings."""

    def __init__(self, module: ir.Module) -> None:
        self.funcs = {}
        self.meshes: dict[str, dict[str, int]] = {}
        for op in module.body.operations:
            if op.operation.name == "func.func":
                self.funcs[op.attributes["sym_name"].value] = op
            elif op.operation.name == "sdy.mesh":
                self.meshes[op.attributes["sym_name"].value] = _axis_sizes(
                    op.attributes["mesh"])
        self.next_id = 0
        self.constants: dict[int, Any] = {}
        # small integer values known at compile time (flat), for constant-index updates
        self.known_ints: dict[int, tuple[int, ...]] = {}
        self.shards: dict[int, tuple[int, ...]] = {}
        self.call_depth = 0

    def note_sharding(self, attr: ir.Attribute, value_type: ir.Type, vid: int) -> None:
        shards = _shards(attr, self.meshes, len(tensor_type(value_type).shape))
        if shards is not None:
            self.shards[vid] = shards

    def note_shardings(self, attr: ir.Attribute, values: Any, ids: list[int] | tuple[int, ...]
                       ) -> None:
        """Shardings of a shard_map's operands or results (one per value)."""
        for s, v, vid in zip(sdy.TensorShardingPerValueAttr(attr).shardings, values, ids,
                             strict=False):
            self.note_sharding(s, v.type, vid)

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def entry(self) -> ir.Operation:
        if "main" in self.funcs:
            return self.funcs["main"]
        for f in self.funcs.values():
            vis = f.attributes["sym_visibility"].value if "sym_visibility" in f.attributes else ""
            if vis != "private":
                return f
        raise IpuCompileError("the StableHLO module has no public entry function")

    def block(self, block: ir.Block, env: ChainMap, outer: SourceLocation | None
              ) -> tuple[list[Op], tuple[int, ...]]:
        """Ops of a block and the value ids its terminator returns."""
        ops: list[Op] = []
        returned: tuple[int, ...] = ()
        for mop in block.operations:
            op = mop.operation
            if op.name in ("func.return", "stablehlo.return"):
                returned = tuple(self.lookup(env, v) for v in op.operands)
            elif op.name == "stablehlo.composite" and _kept_composite(op):
                ops.append(self.tile_op(op, env, outer))
            elif op.name in _CALLEE_ATTR and self.inline_call(op, env, ops, outer):
                continue
            else:
                ops.append(self.op(op, env, outer))
        return ops, returned

    def lookup(self, env: ChainMap, value: ir.Value) -> int:
        if value not in env:
            # A value from outside what we walked (should not happen): give it a fresh id.
            env[value] = self.new_id()
        return env[value]

    def inline_call(self, op: ir.Operation, env: ChainMap, ops: list[Op],
                    outer: SourceLocation | None) -> bool:
        callee = self.funcs.get(ir.FlatSymbolRefAttr(op.attributes[_CALLEE_ATTR[op.name]]).value)
        if callee is None or self.call_depth > 64:
            return False
        loc = source_location(op.location)
        inner = ChainMap({})
        for arg, value in zip(callee.regions[0].blocks[0].arguments, op.operands, strict=False):
            inner[arg] = self.lookup(env, value)
        self.call_depth += 1
        body, returned = self.block(callee.regions[0].blocks[0], inner,
                                    loc if loc.file else outer)
        self.call_depth -= 1
        ops.extend(body)
        for result, rid in zip(op.results, returned, strict=False):
            env[result] = rid
        return True

    def op(self, op: ir.Operation, env: ChainMap, outer: SourceLocation | None) -> Op:
        loc = source_location(op.location)
        if loc.file is None and outer is not None:
            loc = SourceLocation(outer.file, outer.line, outer.function, loc.scope)
        operand_ids = tuple(self.lookup(env, v) for v in op.operands)
        result_ids = []
        for r in op.results:
            env[r] = self.new_id()
            result_ids.append(env[r])
        attrs: dict[str, Any] = {}
        for name in op.attributes:
            try:
                attr = op.attributes[name]
                attrs[name] = np.array(attr).tolist() if name in _DEVICE_ID_ATTRS and \
                    isinstance(attr, ir.DenseElementsAttr) else _attr_to_py(attr)
            except Exception:  # an odd attribute (e.g. a complex constant) must never stop us
                logger.debug("unreadable attribute %s on %s", name, op.name, exc_info=True)
                attrs[name] = None
        if op.name == "stablehlo.constant" and isinstance(attrs.get("value"), int | float):
            self.constants[result_ids[0]] = attrs["value"]
        elif op.name == "sdy.manual_computation":
            self.note_shardings(op.attributes["in_shardings"], op.operands, operand_ids)
            self.note_shardings(op.attributes["out_shardings"], op.results, result_ids)
        elif op.name == "sdy.sharding_constraint":
            self.note_sharding(op.attributes["sharding"], op.results[0].type, result_ids[0])
        regions = []
        for region in op.regions:
            for block in region.blocks:
                inner = env.new_child()
                arg_ids = []
                for a in block.arguments:
                    inner[a] = self.new_id()
                    arg_ids.append(inner[a])
                body, returned = self.block(block, inner, loc)
                regions.append(Region(tuple(arg_ids), body, returned))
        result = Op(
            name=op.name,
            operands=tuple(tensor_type(v.type) for v in op.operands),
            results=tuple(tensor_type(r.type) for r in op.results),
            operand_ids=operand_ids, result_ids=tuple(result_ids), attributes=attrs,
            location=loc, regions=regions)
        if op.name == "stablehlo.while":
            result.trip_count = self.trip_count(result)
        self.note_known_ints(result)
        return result

    def note_known_ints(self, op: Op) -> None:
        """Follow small integer tensors made of constants (the start indices jax builds for
        x.at[1:-1].set(v) or dynamic_update_slice(x, v, (1, 1))), and mark an indexed op whose
        indices all are: attributes["constant_indices"], their flat values in operand order.
        The model then costs it as Poplar's backend does a constant slice or update."""
        known = self.known_ints
        kind = op.name.split(".", 1)[-1]  # not op.kind: tile_op renames the op after this
        out = op.results[0] if len(op.results) == 1 else None
        if out is not None and out.dtype.startswith(("int", "uint")) and \
                0 < out.size <= _MAX_KNOWN_INTS:
            value = op.attributes.get("value") if kind == "constant" else None
            ins = [known.get(v) for v in op.operand_ids]
            if isinstance(value, int):
                known[op.result_ids[0]] = (value,) * out.size
            elif isinstance(value, list):
                flat = np.asarray(value).ravel().tolist()
                if len(flat) == out.size and all(isinstance(x, int) for x in flat):
                    known[op.result_ids[0]] = tuple(flat)
            elif kind in ("convert", "reshape", "bitcast_convert") and ins and ins[0] and \
                    len(ins[0]) == out.size and op.operands[0].dtype.startswith(("int", "uint")):
                known[op.result_ids[0]] = ins[0]
            elif kind == "broadcast_in_dim" and ins and ins[0] and len(ins[0]) == 1:
                known[op.result_ids[0]] = ins[0] * out.size
            elif kind == "concatenate" and ins and all(ins) and len(out.shape) == 1:
                known[op.result_ids[0]] = tuple(x for part in ins for x in part)
        first = _FIRST_INDEX.get(kind)
        if kind in ("scatter", "gather"):
            first = (len(op.operand_ids) - 1) // 2 if kind == "scatter" else 1
            index_ids = op.operand_ids[first:first + 1]
        else:
            index_ids = op.operand_ids[first:] if first is not None else ()
        values = [known.get(v) for v in index_ids]
        if values and all(v is not None for v in values):
            op.attributes["constant_indices"] = [x for v in values for x in v]

    def tile_op(self, op: ir.Operation, env: ChainMap, outer: SourceLocation | None) -> Op:
        """A jax_ipu.tile composite as one op named after it, with its composite attributes; a
        tile_map's one-tile program is read into its `vertex_ops` (costed on one tile)."""
        read = self.op(op, env, outer)
        attrs = dict(read.attributes.get("composite_attributes") or {})
        program = attrs.pop("program", "")
        if program:
            module = ir.Module.parse(program, op.context)  # kept alive while it is read
            sub = _Reader(module)
            sub.next_id = self.next_id
            main = sub.entry().regions[0].blocks[0]
            inner: ChainMap = ChainMap({a: sub.new_id() for a in main.arguments})
            read.vertex_ops, _ = sub.block(main, inner, read.location)
            self.next_id = sub.next_id
        read.name = read.attributes["name"]
        read.attributes = attrs
        return read

    def trip_count(self, loop: Op) -> int | None:
        """Static trips of a counted while: cond `i < limit`, body `i + step`, constants."""
        if len(loop.regions) != 2:
            return None
        cond, body = loop.regions
        if len(cond.ops) < 1 or len(cond.result_ids) != 1:
            return None
        defs = {rid: o for o in cond.ops for rid in o.result_ids}
        compare = defs.get(cond.result_ids[0])
        if compare is None or compare.kind != "compare" or len(compare.operand_ids) != 2:
            return None
        direction = compare.attributes.get("comparison_direction")
        lhs, rhs = compare.operand_ids
        if direction == "GT":
            lhs, rhs, direction = rhs, lhs, "LT"
        if direction != "LT" or lhs not in cond.arg_ids:
            return None
        k = cond.arg_ids.index(lhs)
        start = self.invariant_constant(loop, k)
        limit = self.constant_in(rhs, cond, loop)
        step = self.body_step(body, k)
        if start is None or limit is None or step is None or step <= 0:
            return None
        return max(0, -(-(int(limit) - int(start)) // int(step)))

    def constant_in(self, vid: int, region: Region, loop: Op) -> float | None:
        if vid in self.constants:
            return self.constants[vid]
        if vid in region.arg_ids:
            return self.invariant_constant(loop, region.arg_ids.index(vid))
        return None

    def invariant_constant(self, loop: Op, k: int) -> float | None:
        """Initial value of loop-carried value k, when it is a constant."""
        return self.constants.get(loop.operand_ids[k]) if k < len(loop.operand_ids) else None

    def body_step(self, body: Region, k: int) -> float | None:
        if k >= len(body.result_ids) or k >= len(body.arg_ids):
            return None
        defs = {rid: o for o in body.ops for rid in o.result_ids}
        update = defs.get(body.result_ids[k])
        if update is None or update.kind != "add":
            return None
        arg = body.arg_ids[k]
        others = [v for v in update.operand_ids if v != arg]
        if len(others) != 1 or arg not in update.operand_ids:
            return None
        return self.constants.get(others[0])


def _kept_composite(op: ir.Operation) -> bool:
    return ir.StringAttr(op.attributes["name"]).value.startswith(
        (TILE_COMPOSITE_PREFIX, LIBRARY_COMPOSITE_PREFIX))


def parse(code: bytes | str, ctx: ir.Context | None = None) -> ir.Module:
    """The StableHLO module PJRT's Client_Compile received (portable artifact, bytecode or text),
    parsed once in `ctx` (a lent_context()), else in a context of its own; IpuCompileError when
    it cannot be read."""
    ctx = ctx or _context()
    with ctx, ir.Location.unknown(ctx):
        try:
            return _parse_module(code, ctx)
        except Exception as e:  # MLIR raises plain exceptions
            raise IpuCompileError(f"cannot read the StableHLO program: {e}") from e


def read_program(code: bytes | str | ir.Module) -> Program:
    """Read a parsed module (or what PJRT's Client_Compile receives) into a Program."""
    module = code if isinstance(code, ir.Module) else parse(code)
    with module.context, ir.Location.unknown(module.context):
        reader = _Reader(module)
        main = reader.entry()
        block = main.regions[0].blocks[0]
        env: ChainMap = ChainMap({})
        input_ids = []
        for a in block.arguments:
            env[a] = reader.new_id()
            input_ids.append(env[a])
        ops, returned = reader.block(block, env, None)
        fn_type = ir.FunctionType(main.attributes["function_type"].value)
        mod_attrs = module.operation.attributes
        aliases, donors, names = _arg_info(main, block)
        input_kinds, output_kinds = (_memory_kinds(main, key, len(types)) for key, types in
                                     (("arg_attrs", fn_type.inputs),
                                      ("res_attrs", fn_type.results)))
        for key, types, ids in (("arg_attrs", fn_type.inputs, input_ids),
                                ("res_attrs", fn_type.results, returned)):
            for d, t, vid in zip(main.attributes[key] if key in main.attributes else [], types,
                                 ids, strict=False):
                if "sdy.sharding" in ir.DictAttr(d):
                    reader.note_sharding(ir.DictAttr(d)["sdy.sharding"], t, vid)
        return Program(
            name=mod_attrs["sym_name"].value if "sym_name" in mod_attrs else "main",
            inputs=tuple(tensor_type(t) for t in fn_type.inputs),
            outputs=tuple(tensor_type(t) for t in fn_type.results),
            ops=ops, input_ids=tuple(input_ids), output_ids=returned,
            input_names=names, aliases=aliases,
            donated_inputs=frozenset(donors) | frozenset(aliases),
            input_kinds=input_kinds, output_kinds=output_kinds,
            num_replicas=_int_attr(mod_attrs, "mhlo.num_replicas"),
            num_partitions=_int_attr(mod_attrs, "mhlo.num_partitions"), shards=reader.shards)


def _memory_kinds(main: ir.Operation, key: str, count: int) -> tuple[str, ...]:
    """The memory kind of each argument or result (`key` arg_attrs or res_attrs) of the entry:
    mhlo.memory_kind, which jax writes when a sharding names a kind; "device" otherwise."""
    found = _attr_to_py(main.attributes[key]) if key in main.attributes else []
    kinds = [d.get("mhlo.memory_kind", "device") if isinstance(d, dict) else "device"
             for d in found]
    return tuple(kinds + ["device"] * (count - len(kinds)))


def _int_attr(attrs: ir.OpAttributeMap, name: str) -> int | None:
    if name not in attrs:
        return None
    value = _attr_to_py(attrs[name])
    return value if isinstance(value, int) else None


def _arg_info(main: ir.Operation, block: ir.Block
              ) -> tuple[dict[int, int], set[int], tuple[str | None, ...]]:
    aliases: dict[int, int] = {}
    donors: set[int] = set()
    if "arg_attrs" in main.attributes:
        for i, d in enumerate(_attr_to_py(main.attributes["arg_attrs"])):
            if not isinstance(d, dict):
                continue
            if isinstance(d.get("tf.aliasing_output"), int):
                aliases[i] = d["tf.aliasing_output"]
            if d.get("jax.buffer_donor") is True:
                donors.add(i)
    names = tuple(a.location.name_str if isinstance(a.location, ir.NameLoc) else None
                  for a in block.arguments)
    return aliases, donors, names
