"""Collectives XLA's SPMD partitioner inserted into a sharded program, read from XLA's HLO.

Sharded jax.jit programs reach us with shardings only; their exchange between IPUs is here."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from jax_ipu import _internals
from jax_ipu.compiler import frames as frame_of
from jax_ipu.dtypes import BY_HLO
from jax_ipu.model.costs import op_class
from jax_ipu.model.ir import Op, Program, Region, SourceLocation, TensorType
from jax_ipu.protowire import Message

# The partitioned module is read as XLA's HloModuleProto (as_serialized_hlo_module_proto) rather
# than as the StableHLO jaxlib converts it to: that conversion names every op's replica groups by
# one module-wide mesh, so groups over another mesh or device order come out wrong, and an
# all-to-all over such a mesh no longer verifies (the whole module then fails to parse).
_COLLECTIVES = {
    "all-reduce": "all_reduce", "all-gather": "all_gather", "reduce-scatter": "reduce_scatter",
    "all-to-all": "all_to_all", "collective-permute": "collective_permute",
    "collective-broadcast": "collective_broadcast",
}
_MAX_CALL_DEPTH = 64
_MAX_FRAMES = 256  # a stack of frames deeper than any traceback: a cycle in a damaged index


class _Field:
    """Field numbers read, from xla/service/hlo.proto and xla/xla_data.proto (jaxlib 0.10)."""

    MODULE_COMPUTATIONS, MODULE_ENTRY_ID, MODULE_FRAMES = 3, 6, 17
    COMPUTATION_INSTRUCTIONS, COMPUTATION_PROGRAM_SHAPE, COMPUTATION_ID = 2, 4, 5
    COMPUTATION_ROOT_ID = 6
    PROGRAM_SHAPE_RESULT = 2
    SHAPE_ELEMENT_TYPE, SHAPE_DIMENSIONS, SHAPE_TUPLE = 2, 3, 4
    INSTRUCTION_OPCODE, INSTRUCTION_SHAPE, INSTRUCTION_METADATA = 2, 3, 7
    INSTRUCTION_ID, INSTRUCTION_OPERANDS, INSTRUCTION_CALLS = 35, 36, 38
    INSTRUCTION_BACKEND_CONFIG = 43
    # Replica groups: the old list, then the oneof replica_group_list.
    INSTRUCTION_GROUPS, INSTRUCTION_DEVICE_LIST, INSTRUCTION_IOTA, INSTRUCTION_MESH = 49, 87, 92, 93
    INSTRUCTION_PAIRS = 52  # collective-permute's source-target pairs
    PAIR_SOURCE, PAIR_TARGET = 1, 2  # SourceTarget
    GROUP_IDS = 1  # ReplicaGroup.replica_ids
    DEVICE_LIST_GROUPS, DEVICE_LIST_IOTA = 1, 2  # CollectiveDeviceListProto
    IOTA_GROUPS, IOTA_PER_GROUP, IOTA_DIMS, IOTA_PERM = 1, 2, 3, 4  # IotaReplicaGroupListProto
    MESH, MESH_GROUP_AXES = 1, 2  # MeshAxesReplicaGroupListProto
    MESH_AXES, MESH_DEVICE_IDS = 1, 2  # MeshProto
    # MeshProto's device order as an iota (HLO text "device_ids=([2,2]T(1,0))"): field 3 holds
    # its reshape dims (1) and transpose permutation (2), as jaxlib 0.10's XLA writes them
    # (tests/test_model_partitioned.py pins the layout through XLA's own parser).
    MESH_IOTA_IDS, MESH_IOTA_DIMS, MESH_IOTA_PERM = 3, 1, 2
    AXIS_NAME, AXIS_SIZE = 1, 2  # MeshProto.MeshAxis
    AXIS_INDEX, AXIS_SUB = 1, 2  # AxisRefProto
    SUB_PRE_SIZE, SUB_SIZE = 1, 2  # AxisRefProto.SubAxis
    METADATA_OP_NAME, METADATA_FILE, METADATA_LINE, METADATA_FRAME = 2, 3, 4, 15  # OpMetadata
    # StackFrameIndexProto and its FileLocation and StackFrame (ids are 1-based, 0 is none).
    FRAMES_FILES, FRAMES_FUNCTIONS, FRAMES_LOCATIONS, FRAMES_FRAMES = 1, 2, 3, 4
    LOCATION_FILE, LOCATION_FUNCTION, LOCATION_LINE = 1, 2, 3
    FRAME_LOCATION, FRAME_PARENT = 1, 2


# (file, line, primitive) of an op: the last part of its name-stack scope names the jax
# primitive ("jit(f)/shard_map/psum" in XLA's metadata, "psum" in the StableHLO's locations).
_Source = tuple[str | None, int | None, str | None]


def _source(where: SourceLocation) -> _Source:
    return where.file, where.line, where.scope.rsplit("/", 1)[-1] if where.scope else None


def _dtypes() -> dict[int, str]:
    """XLA's PrimitiveType numbers -> dtype names (HLO spells each type as its enum, lower)."""
    names = {}
    for name, number in _internals.PrimitiveType.__members__.items():
        found = BY_HLO.get(name.lower())
        names[int(number)] = found.name if found is not None else name.lower()
    return names


_DTYPES = _dtypes()
_TUPLE = next(n for n, name in _DTYPES.items() if name == "tuple")


def _types(shape: Message | None) -> tuple[TensorType, ...]:
    """Every array of an HLO shape, tuples flattened (a dynamic dimension counts its bound)."""
    if shape is None:
        return ()
    element = shape.integer(_Field.SHAPE_ELEMENT_TYPE)
    if element == _TUPLE:
        return tuple(t for part in shape.messages(_Field.SHAPE_TUPLE) for t in _types(part))
    return (TensorType(tuple(shape.integers(_Field.SHAPE_DIMENSIONS)),
                       _DTYPES.get(element, f"xla type {element}")),)


@dataclass
class _Instruction:
    opcode: str
    operand_ids: list[int]
    called: list[int]  # called computations' ids (a while's body then condition)
    proto: Message  # the rest, read when needed

    @property
    def types(self) -> tuple[TensorType, ...]:
        return _types(self.proto.message(_Field.INSTRUCTION_SHAPE))


# Bytes that any computation holding a collective, or calling one, contains: its opcode's name,
# or the key of called_computation_ids (field 38, packed or not). One without them is never read
# instruction by instruction (most of a module: XLA:CPU's fused elementwise and dot kernels).
_HINTS = tuple(name.encode() for name in _COLLECTIVES) + (b"\xb2\x02", b"\xb0\x02")


class _Module:
    """One HloModuleProto: computations by id (their instructions read when first asked for),
    the entry's id, and the stack-frame index."""

    def __init__(self, data: bytes) -> None:
        module = Message(data)
        self.raw: dict[int, bytes] = {}
        self.signatures: dict[int, Message | None] = {}
        self.roots: dict[int, int] = {}
        self._bodies: dict[int, list[_Instruction]] = {}
        self._by_id: dict[int, dict[int, _Instruction]] = {}
        for computation in module.messages(_Field.MODULE_COMPUTATIONS):
            cid = computation.integer(_Field.COMPUTATION_ID)
            self.raw[cid] = bytes(computation.view)  # bytes: searchable for _HINTS
            self.signatures[cid] = computation.message(_Field.COMPUTATION_PROGRAM_SHAPE)
            self.roots[cid] = computation.integer(_Field.COMPUTATION_ROOT_ID)
        self.entry = module.integer(_Field.MODULE_ENTRY_ID)
        if self.entry not in self.raw:
            raise ValueError("no ENTRY computation in the partitioned HLO module")
        index = module.message(_Field.MODULE_FRAMES)
        self.files = index.texts(_Field.FRAMES_FILES) if index else []
        self.functions = index.texts(_Field.FRAMES_FUNCTIONS) if index else []
        self.file_locations = index.messages(_Field.FRAMES_LOCATIONS) if index else []
        self.frames = index.messages(_Field.FRAMES_FRAMES) if index else []

    def body(self, cid: int) -> list[_Instruction] | None:
        """The instructions of computation `cid` in order; None when there is none."""
        if cid not in self._bodies:
            if cid not in self.raw:
                return None
            body, ids = self._bodies[cid], self._by_id[cid] = [], {}
            for proto in Message(self.raw[cid]).messages(_Field.COMPUTATION_INSTRUCTIONS):
                inst = _Instruction(proto.text(_Field.INSTRUCTION_OPCODE),
                                    proto.integers(_Field.INSTRUCTION_OPERANDS),
                                    proto.integers(_Field.INSTRUCTION_CALLS), proto)
                body.append(inst)
                ids[proto.integer(_Field.INSTRUCTION_ID)] = inst
        return self._bodies[cid]

    def instruction(self, cid: int, iid: int) -> _Instruction | None:
        """Instruction `iid` of computation `cid` (operands are in their user's computation)."""
        self.body(cid)
        return self._by_id.get(cid, {}).get(iid)

    def may_hold_collectives(self, cid: int) -> bool:
        """False when computation `cid` neither runs a collective nor calls a computation."""
        raw = self.raw.get(cid)
        return raw is not None and any(hint in raw for hint in _HINTS)

    def stack(self, frame_id: int) -> list[frame_of.Frame]:
        """The frames of stack frame `frame_id` (1-based), innermost first."""
        out: list[frame_of.Frame] = []
        seen: set[int] = set()
        while 0 < frame_id <= len(self.frames) and frame_id not in seen and \
                len(out) < _MAX_FRAMES:
            seen.add(frame_id)
            frame = self.frames[frame_id - 1]
            where = _item(self.file_locations, frame.integer(_Field.FRAME_LOCATION))
            if where is not None:
                file = _item(self.files, where.integer(_Field.LOCATION_FILE))
                function = _item(self.functions, where.integer(_Field.LOCATION_FUNCTION))
                if file:
                    out.append((file, where.integer(_Field.LOCATION_LINE), function or None))
            frame_id = frame.integer(_Field.FRAME_PARENT)
        return out

    def location(self, inst: _Instruction) -> SourceLocation | None:
        """Where jax's metadata says the op came from (frames.location of its stack)."""
        metadata = inst.proto.message(_Field.INSTRUCTION_METADATA)
        if metadata is None:
            return None
        scope = metadata.text(_Field.METADATA_OP_NAME) or None
        frames = self.stack(metadata.integer(_Field.METADATA_FRAME))
        if not frames and metadata.text(_Field.METADATA_FILE):
            frames = [(metadata.text(_Field.METADATA_FILE),
                       metadata.integer(_Field.METADATA_LINE), None)]
        if scope is None and not frames:
            return None
        return frame_of.location(scope, frames)

    def result_types(self) -> tuple[TensorType, ...]:
        """The entry computation's results: what one device's execution returns."""
        signature = self.signatures[self.entry]
        result = signature.message(_Field.PROGRAM_SHAPE_RESULT) if signature else None
        if result is not None:
            return _types(result)
        root = self.instruction(self.entry, self.roots[self.entry])
        return root.types if root else ()


def _item(items: list, one_based: int):
    return items[one_based - 1] if 0 < one_based <= len(items) else None


def _iota(shape: list[int], dims: list[int], perm: list[int] | None) -> np.ndarray:
    ids = np.arange(math.prod(dims)).reshape(dims)
    return (ids.transpose(perm) if perm else ids).reshape(shape)


def _iota_groups(iota: Message) -> list[list[int]]:
    shape = [iota.integer(_Field.IOTA_GROUPS), iota.integer(_Field.IOTA_PER_GROUP)]
    return _iota(shape, iota.integers(_Field.IOTA_DIMS),
                 iota.integers(_Field.IOTA_PERM) or None).tolist()


def _mesh_groups(groups: Message) -> list[list[int]]:
    """Groups of a mesh-axes replica group list: the devices that differ only along the named
    (sub-)axes, ordered by them; a sub-axis (p)s of an axis a is the middle factor of
    a = [p, s, rest]. Devices sit at the mesh's positions as its device_ids say (else iota)."""
    mesh = groups.message(_Field.MESH)
    axes = mesh.messages(_Field.MESH_AXES) if mesh else []
    sizes = [a.integer(_Field.AXIS_SIZE) for a in axes]
    if not sizes:
        return []
    ids, iota = mesh.integers(_Field.MESH_DEVICE_IDS), mesh.message(_Field.MESH_IOTA_IDS)
    if ids:
        devices = np.array(ids).reshape(sizes)
    elif iota is not None:
        devices = _iota(sizes, iota.integers(_Field.MESH_IOTA_DIMS),
                        iota.integers(_Field.MESH_IOTA_PERM) or None)
    else:
        devices = np.arange(math.prod(sizes)).reshape(sizes)
    wanted = []
    for ref in groups.messages(_Field.MESH_GROUP_AXES):
        sub = ref.message(_Field.AXIS_SUB)
        pre, size = ((sub.integer(_Field.SUB_PRE_SIZE, 1), sub.integer(_Field.SUB_SIZE))
                     if sub else (1, 0))
        wanted.append((ref.integer(_Field.AXIS_INDEX), pre, size))
    # Split each mesh axis at the boundaries of the sub-axes named on it.
    cuts = [{1, n} for n in sizes]
    for axis, pre, size in wanted:
        if size:
            cuts[axis] |= {pre, pre * size}
    factors, index = [], {}
    for axis, axis_cuts in enumerate(cuts):
        bounds = sorted(axis_cuts)
        for lo, hi in zip(bounds, bounds[1:], strict=False):
            index[(axis, lo)] = len(factors)
            factors.append(hi // lo)
    grouped = []
    for axis, pre, size in wanted:
        bounds = sorted(cuts[axis])
        span = (pre, pre * size) if size else (1, sizes[axis])
        grouped += [index[(axis, lo)] for lo in bounds[:-1] if span[0] <= lo < span[1]]
    rest = [f for f in range(len(factors)) if f not in grouped]
    size = math.prod(factors[f] for f in grouped)
    return devices.reshape(factors).transpose(rest + grouped).reshape(-1, size).tolist()


def _replica_groups(inst: Message) -> list[list[int]]:
    """Device groups of a collective; [] when it names none (every device)."""
    if (mesh := inst.message(_Field.INSTRUCTION_MESH)) is not None:
        return _mesh_groups(mesh)
    if (iota := inst.message(_Field.INSTRUCTION_IOTA)) is not None:
        return _iota_groups(iota)
    if (listed := inst.message(_Field.INSTRUCTION_DEVICE_LIST)) is not None:
        if (iota := listed.message(_Field.DEVICE_LIST_IOTA)) is not None:
            return _iota_groups(iota)
        return [g.integers(_Field.GROUP_IDS) for g in listed.messages(_Field.DEVICE_LIST_GROUPS)]
    return [g.integers(_Field.GROUP_IDS) for g in inst.messages(_Field.INSTRUCTION_GROUPS)]


def _trip_count(inst: _Instruction) -> int | None:
    """XLA's known trip count of a while, from its backend config (JSON)."""
    try:
        config = json.loads(inst.proto.raw(_Field.INSTRUCTION_BACKEND_CONFIG) or b"{}")
        return int(config["known_trip_count"]["n"])
    except (ValueError, KeyError, TypeError):
        return None


class _Reader:
    """Walks the module from its entry, keeping collectives and the control flow around them."""

    def __init__(self, module: _Module, skip: frozenset[_Source]) -> None:
        self.module = module
        self.skip = skip
        self.depth = 0
        self.relevant: dict[int, bool] = {}

    def has_collectives(self, cid: int) -> bool:
        """Whether the computation runs a collective, itself or in what it calls."""
        if cid not in self.relevant:
            self.relevant[cid] = False  # a cycle (never in valid HLO) must not recurse
            self.relevant[cid] = self.module.may_hold_collectives(cid) and any(
                i.opcode in _COLLECTIVES or any(map(self.has_collectives, i.called))
                for i in self.module.body(cid) or ())
        return self.relevant[cid]

    def computation(self, cid: int, outer: SourceLocation) -> list[Op]:
        body = self.module.body(cid)
        if body is None or self.depth > _MAX_CALL_DEPTH:
            raise ValueError(f"HLO computation {cid} missing or called too deeply")
        self.depth += 1
        ops: list[Op] = []
        for inst in body:
            # Most instructions (and every fused computation of XLA:CPU's elementwise and
            # dot kernels) have no collective: skip them before reading their metadata.
            if inst.opcode in _COLLECTIVES or any(map(self.has_collectives, inst.called)):
                ops += self.instruction(cid, inst, self.module.location(inst) or outer)
        self.depth -= 1
        return ops

    def instruction(self, cid: int, inst: _Instruction, where: SourceLocation) -> list[Op]:
        if inst.opcode in _COLLECTIVES:
            if _source(where) in self.skip or (where.file, where.line, None) in self.skip:
                return []
            return [self.collective(cid, inst, where)]
        if inst.opcode == "while":  # called: body, condition
            body, condition = (inst.called + [None, None])[:2]
            return [Op("stablehlo.while", (), (), location=where,
                       regions=[self.region(condition, where), self.region(body, where)],
                       trip_count=_trip_count(inst))]
        if inst.opcode == "conditional":  # called: the branches in order (true, false)
            return [Op("stablehlo.case", (), (), location=where,
                       regions=[self.region(c, where) for c in inst.called])]
        # Fusions, calls and async wrappers run their computations once, in place.
        return [op for cid in inst.called for op in self.computation(cid, where)]

    def region(self, cid: int | None, where: SourceLocation) -> Region:
        return Region((), self.computation(cid, where) if cid is not None else [])

    def collective(self, cid: int, inst: _Instruction, where: SourceLocation) -> Op:
        attrs: dict = {}
        if inst.opcode == "collective-permute":
            attrs["source_target_pairs"] = [
                [pair.integer(_Field.PAIR_SOURCE), pair.integer(_Field.PAIR_TARGET)]
                for pair in inst.proto.messages(_Field.INSTRUCTION_PAIRS)]
        else:
            attrs["replica_groups"] = _replica_groups(inst.proto)
        regions = []
        if inst.called:
            # The combining body (add, max...): its elementwise ops set the cost per element.
            body = self.module.body(inst.called[0]) or []
            ops = [Op(f"stablehlo.{i.opcode.replace('-', '_')}", (), i.types) for i in body]
            regions = [Region((), [o for o in ops if op_class(o) == "elementwise"])]
        operands = tuple(t for oid in inst.operand_ids
                         if (operand := self.module.instruction(cid, oid)) is not None
                         for t in operand.types)
        return Op(f"stablehlo.{_COLLECTIVES[inst.opcode]}", operands, inst.types,
                  attributes=attrs, location=where, regions=regions)


def read_collectives(module: bytes, skip: frozenset[_Source] = frozenset()) -> list[Op]:
    """Collectives of an HLO module (a serialized HloModuleProto) in program order, per device,
    inside the while and case ops that repeat or choose them (all other ops left out); those
    whose _source() is in `skip` are left out too (a None name there stands for any op of its
    line). Raises ValueError for bytes it cannot read."""
    hlo = _Module(module)
    return _Reader(hlo, skip).computation(hlo.entry, SourceLocation())


def entry_result_types(module: bytes) -> tuple[TensorType, ...]:
    """The per-device outputs of a partitioned module: its entry computation's result arrays."""
    return _Module(module).result_types()


def inserted_collectives(program: Program, module: bytes) -> list[Op]:
    """Collectives XLA's partitioned module (a serialized HloModuleProto) of `program` has and
    the program lacks.

    Collectives the program has itself (shard_map, pmap) reach the partitioned module with
    their source line and primitive name (psum, all_gather...), so collectives from the same
    line and primitive are taken to be them, whatever XLA turned them into."""
    own = frozenset(_source(op.location) for op in program.walk()
                    if op_class(op) == "collective")
    return read_collectives(module, own)
