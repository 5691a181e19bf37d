"""Collectives XLA's SPMD partitioner inserted into a sharded program, read from XLA's HLO.

Sharded jax.jit programs reach us with shardings only; their exchange between IPUs is here."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from jax_ipu.dtypes import BY_HLO
from jax_ipu.model.costs import op_class
from jax_ipu.model.ir import Op, Program, Region, SourceLocation, TensorType

# The partitioned module is read as HLO text rather than as the StableHLO jaxlib converts it
# to: that conversion names every op's replica groups by one module-wide mesh, so groups over
# another mesh or device order come out wrong, and an all-to-all over such a mesh no longer
# verifies (the whole module then fails to parse).
_COLLECTIVES = {
    "all-reduce": "all_reduce", "all-gather": "all_gather", "reduce-scatter": "reduce_scatter",
    "all-to-all": "all_to_all", "collective-permute": "collective_permute",
    "collective-broadcast": "collective_broadcast",
}
_MAX_CALL_DEPTH = 64

_COMPUTATION = re.compile(r"^(?:ENTRY )?%?(?P<name>[^\s(]+) \(.*\{$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?(?P<name>[^\s=]+) = (?P<rest>.*)$")
_ARRAY = re.compile(r"(?P<dtype>[a-z][a-z0-9]*)\[(?P<dims>[^\]]*)\]")
_OPCODE = re.compile(r"(?P<opcode>[\w\-]+)\(")
_NAME = re.compile(r"%([^\s,(){}]+)")
_IOTA = re.compile(r"\[(?P<shape>[\d,]+)\]<=\[(?P<dims>[\d,]+)\](?:T\((?P<perm>[\d,]+)\))?")
_MESH = re.compile(r"mesh\[(?P<axes>[^\]]*)\](?:, device_ids=\((?P<ids>(?:[^()]|\([^()]*\))*)\))?"
                   r" \{(?P<groups>[^}]*)\}")
_MESH_AXIS = re.compile(r"'?(?P<name>[^'=,]+)'?=(?P<size>\d+)")
_GROUP_AXIS = re.compile(r"'?(?P<name>[^':,]+)'?(?::\((?P<pre>\d+)\)(?P<size>\d+))?")
_TRIP_COUNT = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
_TABLE_ROW = re.compile(r"^(\d+) (.*)$")
_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\d+)')


# (file, line, primitive) of an op: the last part of its name-stack scope names the jax
# primitive ("jit(f)/shard_map/psum" in XLA's metadata, "psum" in the StableHLO's locations).
_Source = tuple[str | None, int | None, str | None]


def _source(where: SourceLocation) -> _Source:
    return where.file, where.line, where.scope.rsplit("/", 1)[-1] if where.scope else None


@dataclass
class _Instruction:
    name: str
    types: tuple[TensorType, ...]
    opcode: str
    operands: list[str]
    attrs: str  # everything after the operand list


class _Module:
    """One HLO module's text: computations by name, and the source-location tables."""

    def __init__(self, text: str) -> None:
        self.computations: dict[str, list[_Instruction]] = {}
        self.entry = ""
        self.tables: dict[str, dict[int, str]] = {}
        section: dict[int, str] | None = None
        body: list[_Instruction] | None = None
        for line in text.splitlines():
            if body is not None:
                if line.startswith("}"):  # "}" or "}, execution_thread=..."
                    body = None
                elif m := _INSTRUCTION.match(line):
                    body.append(self.instruction(m["name"], m["rest"]))
                continue
            if m := _COMPUTATION.match(line):
                body = self.computations.setdefault(m["name"], [])
                if line.startswith("ENTRY"):
                    self.entry = m["name"]
            elif line in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
                section = self.tables.setdefault(line, {})
            elif section is not None and (m := _TABLE_ROW.match(line)):
                section[int(m[1])] = m[2]
            else:
                section = None
        if not self.entry:
            raise ValueError("no ENTRY computation in the partitioned HLO module")

    def instruction(self, name: str, rest: str) -> _Instruction:
        end = _closing(rest, 0) + 1 if rest.startswith("(") else rest.index(" ")
        m = _OPCODE.match(rest, end + 1)
        if m is None:
            raise ValueError(f"unreadable HLO instruction: {name} = {rest[:120]}")
        close = _closing(rest, m.end() - 1)
        return _Instruction(name, _types(rest[:end]), m["opcode"],
                            _NAME.findall(rest[m.end():close]), rest[close + 1:])

    def location(self, attrs: str) -> SourceLocation | None:
        """Where jax's metadata says the op came from: its innermost (user) frame."""
        metadata = _value(attrs, "metadata")
        if metadata is None:
            return None
        fields = {k: v.strip('"') for k, v in _FIELD.findall(metadata)}
        scope = fields.get("op_name")
        if "source_file" in fields:
            return SourceLocation(fields["source_file"], int(fields.get("source_line", 0)),
                                  None, scope)
        frame = self.row("StackFrames", fields.get("stack_frame_id"))
        where = self.row("FileLocations", frame.get("file_location_id"))
        if not where:
            return SourceLocation(scope=scope)
        file = self.tables.get("FileNames", {}).get(int(where["file_name_id"]), "").strip('"')
        function = self.tables.get("FunctionNames", {}).get(
            int(where.get("function_name_id", 0)), "").strip('"')
        return SourceLocation(file or None, int(where["line"]), function or None, scope)

    def row(self, table: str, key: str | None) -> dict[str, str]:
        text = self.tables.get(table, {}).get(int(key)) if key else None
        return dict(_FIELD.findall(text)) if text else {}


def _closing(text: str, start: int) -> int:
    """Index of the bracket closing the one at text[start] (quotes respected)."""
    depth, quoted = 0, False
    for i in range(start, len(text)):
        c = text[i]
        if c == '"' and text[i - 1] != "\\":
            quoted = not quoted
        elif quoted:
            continue
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return i
    raise ValueError(f"unbalanced brackets in HLO: {text[start:start + 120]}")


def _value(attrs: str, key: str) -> str | None:
    """The text of attribute `key=...` (a bracketed value whole, else up to the next comma)."""
    m = re.search(rf"(?:^|, ){re.escape(key)}=", attrs)
    if m is None:
        return None
    start = m.end()
    if attrs[start:start + 1] in ("{", "(", "["):
        return attrs[start:_closing(attrs, start) + 1]
    end = attrs.find(",", start)
    return attrs[start:] if end < 0 else attrs[start:end]


def _dtype(hlo: str) -> str:
    found = BY_HLO.get(hlo)
    return hlo if found is None else found.name


def _types(shape: str) -> tuple[TensorType, ...]:
    """Every array of an HLO shape (tuples flattened), e.g. "(f32[2,3]{1,0}, s32[])"."""
    types = []
    for m in _ARRAY.finditer(shape):
        dims = [d.strip().removeprefix("<=") for d in m["dims"].split(",") if d.strip()]
        types.append(TensorType(tuple(int(d) if d.isdigit() else -1 for d in dims),
                                _dtype(m["dtype"])))
    return tuple(types)


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def _iota(shape: list[int], dims: list[int], perm: list[int] | None) -> np.ndarray:
    ids = np.arange(math.prod(dims)).reshape(dims)
    return (ids.transpose(perm) if perm else ids).reshape(shape)


def _mesh_groups(m: re.Match) -> list[list[int]]:
    """Groups of a mesh-axes replica group list: the devices that differ only along the named
    (sub-)axes, ordered by them; a sub-axis "a":(p)s is the middle factor of a = [p, s, rest]."""
    names, sizes = zip(*((a["name"], int(a["size"])) for a in _MESH_AXIS.finditer(m["axes"])),
                       strict=True)
    ids_text = m["ids"] or ""
    iota = _IOTA.fullmatch(f"[{','.join(map(str, sizes))}]<={ids_text}") if ids_text else None
    if iota:
        devices = _iota(list(sizes), _ints(iota["dims"]),
                        _ints(iota["perm"]) if iota["perm"] else None)
    elif ids_text:
        devices = np.array(_ints(ids_text)).reshape(sizes)
    else:
        devices = np.arange(math.prod(sizes)).reshape(sizes)
    wanted = [(names.index(a["name"]), int(a["pre"] or 1), int(a["size"] or 0))
              for a in _GROUP_AXIS.finditer(m["groups"]) if a["name"].strip()]
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


def _replica_groups(attrs: str) -> list[list[int]]:
    """Device groups of a collective; [] when it names none (every device)."""
    found = re.search(r"(?:^|, )replica_groups=", attrs)
    if found is None:
        return []
    text = attrs[found.end():]
    if m := _MESH.match(text):
        return _mesh_groups(m)
    if m := _IOTA.match(text):
        return _iota(_ints(m["shape"]), _ints(m["dims"]),
                     _ints(m["perm"]) if m["perm"] else None).tolist()
    if text.startswith("{"):
        inner = text[1:_closing(text, 0)]
        return [_ints(g) for g in re.findall(r"\{([^{}]*)\}", inner)]
    raise ValueError(f"unreadable replica groups: {text[:120]}")


class _Reader:
    """Walks the module from its entry, keeping collectives and the control flow around them."""

    def __init__(self, module: _Module, skip: frozenset[_Source]) -> None:
        self.module = module
        self.skip = skip
        self.depth = 0
        self.relevant: dict[str, bool] = {}

    def callees(self, inst: _Instruction) -> list[str]:
        return [n for n in _NAME.findall(inst.attrs) if n in self.module.computations]

    def has_collectives(self, name: str) -> bool:
        """Whether the computation runs a collective, itself or in what it calls."""
        if name not in self.relevant:
            self.relevant[name] = False  # a cycle (never in valid HLO) must not recurse
            self.relevant[name] = any(
                i.opcode in _COLLECTIVES or any(map(self.has_collectives, self.callees(i)))
                for i in self.module.computations[name])
        return self.relevant[name]

    def computation(self, name: str, outer: SourceLocation) -> list[Op]:
        body = self.module.computations.get(name)
        if body is None or self.depth > _MAX_CALL_DEPTH:
            raise ValueError(f"HLO computation {name} missing or called too deeply")
        types = {i.name: i.types for i in body}
        self.depth += 1
        ops: list[Op] = []
        for inst in body:
            # Most instructions (and every fused computation of XLA:CPU's elementwise and
            # dot kernels) have no collective: skip them before reading their metadata.
            if inst.opcode in _COLLECTIVES or any(map(self.has_collectives,
                                                      self.callees(inst))):
                ops += self.instruction(inst, types, self.module.location(inst.attrs) or outer)
        self.depth -= 1
        return ops

    def instruction(self, inst: _Instruction, types: dict[str, tuple[TensorType, ...]],
                    where: SourceLocation) -> list[Op]:
        if inst.opcode in _COLLECTIVES:
            if _source(where) in self.skip or (where.file, where.line, None) in self.skip:
                return []
            return [self.collective(inst, types, where)]
        calls = {k: (_value(inst.attrs, k) or "").lstrip("%") for k in
                 ("condition", "body", "calls", "to_apply", "branch_computations",
                  "true_computation", "false_computation")}
        if inst.opcode == "while":
            regions = [self.region(calls["condition"], where), self.region(calls["body"], where)]
            trips = _TRIP_COUNT.search(inst.attrs)
            return [Op("stablehlo.while", (), (), location=where, regions=regions,
                       trip_count=int(trips[1]) if trips else None)]
        if inst.opcode == "conditional":
            names = _NAME.findall(calls["branch_computations"]) or \
                [n for n in (calls["true_computation"], calls["false_computation"]) if n]
            return [Op("stablehlo.case", (), (), location=where,
                       regions=[self.region(n, where) for n in names])]
        # Fusions, calls and async wrappers run their computation once, in place.
        callee = calls["calls"] or (calls["to_apply"] if inst.opcode == "call" else "")
        return self.computation(callee, where) if callee else []

    def region(self, name: str, where: SourceLocation) -> Region:
        return Region((), self.computation(name, where) if name else [])

    def collective(self, inst: _Instruction, types: dict[str, tuple[TensorType, ...]],
                   where: SourceLocation) -> Op:
        attrs: dict = {}
        if inst.opcode == "collective-permute":
            pairs = _value(inst.attrs, "source_target_pairs") or "{}"
            attrs["source_target_pairs"] = [_ints(p) for p in re.findall(r"\{([^{}]*)\}",
                                                                          pairs[1:-1])]
        else:
            attrs["replica_groups"] = _replica_groups(inst.attrs)
        regions = []
        reducer = _value(inst.attrs, "to_apply")
        if reducer:
            # The combining body (add, max...): its elementwise ops set the cost per element.
            body = self.module.computations.get(reducer.lstrip("%"), [])
            ops = [Op(f"stablehlo.{i.opcode.replace('-', '_')}", (), i.types) for i in body]
            regions = [Region((), [o for o in ops if op_class(o) == "elementwise"])]
        operands = tuple(t for name in inst.operands for t in types.get(name, ()))
        return Op(f"stablehlo.{_COLLECTIVES[inst.opcode]}", operands, inst.types,
                  attributes=attrs, location=where, regions=regions)


def read_collectives(hlo: str, skip: frozenset[_Source] = frozenset()) -> list[Op]:
    """Collectives of an HLO module in program order, per device, inside the while and case
    ops that repeat or choose them (all other ops left out); those whose _source() is in
    `skip` are left out too (a None name there stands for any op of its line). Raises
    ValueError for text it cannot read."""
    module = _Module(hlo)
    return _Reader(module, skip).computation(module.entry, SourceLocation())


def entry_result_types(hlo: str) -> tuple[TensorType, ...]:
    """The per-device outputs of a partitioned module: its ENTRY computation's result arrays."""
    for line in hlo.splitlines():
        if line.startswith("ENTRY ") and " -> " in line:
            return _types(line.rsplit(" -> ", 1)[1])
    raise ValueError("no ENTRY computation in the partitioned HLO module")


def inserted_collectives(program: Program, hlo: str) -> list[Op]:
    """Collectives XLA's partitioned module `hlo` of `program` has and the program lacks.

    Collectives the program has itself (shard_map, pmap) reach the partitioned module with
    their source line and primitive name (psum, all_gather...), so collectives from the same
    line and primitive are taken to be them, whatever XLA turned them into."""
    own = frozenset(_source(op.location) for op in program.walk()
                    if op_class(op) == "collective")
    return read_collectives(hlo, own)
