"""Collectives between IPUs: where device ids sit in an IPU-POD, and the link time of each op.

Rings, or recursive doubling for small all-reduces, over IPU-Links and GW-Links (targets.py)."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from jax_ipu.model.ir import Op
from jax_ipu.model.targets import (
    GW_LINK_BYTES_PER_S,
    GW_LINK_STEP_LATENCY_S,
    GW_LINKS_PER_MACHINE,
    IPU_LINK_SYNC_S_PER_HOP,
    Target,
)

# Ops whose data a ring pass moves: per step every IPU sends one k-th of the data.
RING_STEPS = {
    "all_reduce": lambda k: 2 * (k - 1),  # reduce-scatter, then all-gather
    "reduce_scatter": lambda k: k - 1,
    "all_gather": lambda k: k - 1,
}


@dataclass(frozen=True)
class Hop:
    """One step between two IPUs: which link class carries it, at what rate, after what delay."""

    kind: str  # "machine" (same machine), "pod" (IPU-Link between machines), "gateway"
    bytes_per_cycle: float  # each direction
    latency_cycles: float


@dataclass(frozen=True)
class Layout:
    """How num_ipus devices, numbered in order, fill machines and PODs."""

    num_ipus: int
    ipus_per_machine: int
    machines: int
    pods: int


@dataclass
class CollectivePlan:
    """The link cost of one collective op: the slowest of its replica groups, per execution."""

    kind: str
    algorithm: str  # "ring", "recursive doubling", "routed", "pipelined ring", "none"
    group_size: int
    num_groups: int
    steps: int
    link_bytes: int  # bytes the busiest IPU sends over its links
    latency_cycles: float
    transfer_cycles: float
    reduced_bytes: int = 0  # bytes each IPU combines into its own data (sums, maxima...)
    combine_steps: int = 0  # steps that end with such a combining pass on the tiles
    slowest_hop: str = ""  # link class of the slowest hop used

    @property
    def cycles(self) -> float:
        return self.latency_cycles + self.transfer_cycles

    def describe(self) -> str:
        if self.algorithm == "none":
            return f"{self.kind}: groups of 1 IPU, nothing crosses a link"
        groups = f" x {self.num_groups} groups" if self.num_groups > 1 else ""
        return (f"{self.algorithm} {self.kind} over {self.group_size} IPUs{groups}: "
                f"{self.steps} steps, {self.link_bytes} B over links per IPU, "
                f"slowest hop {self.slowest_hop}, {self.latency_cycles:.0f} latency + "
                f"{self.transfer_cycles:.0f} transfer cycles")


def layout(num_ipus: int, target: Target) -> Layout:
    """Machines and PODs that num_ipus devices occupy (ids fill machines in order)."""
    return Layout(num_ipus, target.ipus_per_machine,
                  machines=-(-num_ipus // target.ipus_per_machine),
                  pods=-(-num_ipus // target.link_domain_ipus))


def hop(a: int, b: int, target: Target) -> Hop:
    """The link class between devices a and b, and its rate in one direction."""
    # A step over IPU-Links: a global sync over the hop, then each chip's sync and exchange
    # set-up, as for an exchange on the chip.
    link_step = IPU_LINK_SYNC_S_PER_HOP * target.clock_hz + target.sync_cycles + \
        target.exchange_setup_cycles
    if a // target.ipus_per_machine == b // target.ipus_per_machine:
        rate = target.links_per_neighbour * target.ipu_link_bytes_per_s
        kind, latency = "machine", link_step
    elif a // target.link_domain_ipus == b // target.link_domain_ipus:
        rate = target.pod_links_per_ipu * target.ipu_link_bytes_per_s
        kind, latency = "pod", link_step
    else:
        rate, kind, latency = GW_LINKS_PER_MACHINE * GW_LINK_BYTES_PER_S, "gateway", \
            GW_LINK_STEP_LATENCY_S * target.clock_hz
    return Hop(kind, rate / target.clock_hz, latency)


def _slowest(hops: list[Hop]) -> Hop:
    return min(hops, key=lambda h: (h.bytes_per_cycle, -h.latency_cycles))


def ring_hop(a: int, b: int, ring: list[int], target: Target) -> Hop:
    """The hop from a to its ring neighbour b: an IPU's links to other machines are shared
    between its neighbours there (an IPU whose both ring neighbours are in other machines
    has half of them to each)."""
    h = hop(a, b, target)
    if h.kind != "pod" or len(ring) < 3:
        return h
    i = ring.index(a)
    neighbours = {ring[i - 1], ring[(i + 1) % len(ring)]}
    away = sum(1 for n in neighbours if hop(a, n, target).kind == "pod")
    return Hop(h.kind, h.bytes_per_cycle / max(1, away), h.latency_cycles)


def _ring_hops(ring: list[int], target: Target) -> list[Hop]:
    return [ring_hop(a, b, ring, target) for a, b in zip(ring, ring[1:] + ring[:1], strict=True)]


def ring_plan(kind: str, nbytes: int, ring: list[int], target: Target) -> CollectivePlan:
    """A bidirectional ring: each step every IPU sends nbytes/k, half to each neighbour (two
    IPUs are each other's only neighbour: all of it crosses their one hop).

    All IPUs step together, so a step lasts as long as its slowest hop."""
    k = len(ring)
    steps = RING_STEPS[kind](k)
    slow = _slowest(_ring_hops(ring, target))
    per_direction = nbytes / (2 * k) if k > 2 else nbytes / k
    combining = kind in ("all_reduce", "reduce_scatter")
    return CollectivePlan(
        kind, "ring", k, 1, steps, link_bytes=math.ceil(steps * nbytes / k),
        latency_cycles=steps * slow.latency_cycles,
        transfer_cycles=steps * per_direction / slow.bytes_per_cycle,
        reduced_bytes=(k - 1) * nbytes // k if combining else 0,
        combine_steps=k - 1 if combining else 0, slowest_hop=slow.kind)


def hierarchical_plan(nbytes: int, group: list[int], target: Target) -> CollectivePlan | None:
    """All-reduce of a group spread evenly over several machines, in three rings: a
    reduce-scatter inside each machine, an all-reduce of each 1/c share between machines
    (the i-th IPUs of all machines), an all-gather inside each machine. None if uneven."""
    machines: dict[int, list[int]] = defaultdict(list)
    for d in group:
        machines[d // target.ipus_per_machine].append(d)
    members = list(machines.values())
    c = len(members[0])
    if len(members) < 2 or c < 2 or any(len(m) != c for m in members):
        return None
    inside, across = members[0], [m[0] for m in members]
    parts = [ring_plan("reduce_scatter", nbytes, inside, target),
             ring_plan("all_reduce", nbytes // c, across, target),
             ring_plan("all_gather", nbytes, inside, target)]
    return CollectivePlan(
        "all_reduce", "hierarchical ring", len(group), 1, sum(p.steps for p in parts),
        link_bytes=sum(p.link_bytes for p in parts),
        latency_cycles=sum(p.latency_cycles for p in parts),
        transfer_cycles=sum(p.transfer_cycles for p in parts),
        reduced_bytes=sum(p.reduced_bytes for p in parts),
        combine_steps=sum(p.combine_steps for p in parts), slowest_hop=parts[1].slowest_hop)


def doubling_plan(nbytes: int, ring: list[int], target: Target) -> CollectivePlan:
    """All-reduce by recursive doubling: log2(k) exchanges of all the data, fewer steps.

    The partner of step s is 2**s places along the ring; flows of all IPUs share the hops
    on the way, so a step of distance h carries h flows on each hop."""
    k = len(ring)
    slow = _slowest(_ring_hops(ring, target))
    distances = [min(2 ** s, k - 2 ** s) for s in range(math.ceil(math.log2(k)))]
    if k & (k - 1):
        # A group that is not a power of two folds its remainder into neighbours first.
        distances.append(1)
    steps = len(distances)
    return CollectivePlan(
        "all_reduce", "recursive doubling", k, 1, steps,
        link_bytes=sum(h * nbytes for h in distances),
        latency_cycles=sum(h * slow.latency_cycles for h in distances),
        transfer_cycles=sum(h * nbytes / slow.bytes_per_cycle for h in distances),
        reduced_bytes=steps * nbytes, combine_steps=steps, slowest_hop=slow.kind)


def routed_plan(kind: str, flows: list[tuple[int, int, float]], ring: list[int],
                target: Target) -> CollectivePlan:
    """Point-to-point flows (source, destination, bytes) routed the short way round the ring.

    One phase: the busiest directed hop sets the transfer time, the longest route the latency."""
    k = len(ring)
    place = {d: i for i, d in enumerate(ring)}
    load: dict[tuple[int, int], float] = defaultdict(float)
    sent: dict[int, float] = defaultdict(float)
    longest: list[Hop] = []
    for src, dst, nbytes in flows:
        if src == dst or nbytes <= 0:
            continue
        forward = (place[dst] - place[src]) % k
        step = 1 if forward <= k - forward else -1
        route, i = [], place[src]
        while ring[i] != dst:
            j = (i + step) % k
            route.append(ring_hop(ring[i], ring[j], ring, target))
            load[(i, j)] += nbytes
            sent[ring[i]] += nbytes
            i = j
        if sum(h.latency_cycles for h in route) > sum(h.latency_cycles for h in longest):
            longest = route
    if not load:
        return CollectivePlan(kind, "none", k, 1, 0, 0, 0.0, 0.0)
    transfer = max(b / ring_hop(ring[i], ring[j], ring, target).bytes_per_cycle
                   for (i, j), b in load.items())
    slow = _slowest([ring_hop(ring[i], ring[j], ring, target) for i, j in load])
    return CollectivePlan(
        kind, "routed", k, 1, 1, link_bytes=math.ceil(max(sent.values())),
        latency_cycles=sum(h.latency_cycles for h in longest), transfer_cycles=transfer,
        slowest_hop=slow.kind)


def broadcast_plan(nbytes: int, ring: list[int], target: Target) -> CollectivePlan:
    """The first IPU of the group sends to both ring neighbours; each forwards as it receives."""
    k = len(ring)
    slow = _slowest(_ring_hops(ring, target))
    hops = k // 2
    return CollectivePlan(
        "collective_broadcast", "pipelined ring", k, 1, hops,
        link_bytes=nbytes * min(2, k - 1), latency_cycles=hops * slow.latency_cycles,
        transfer_cycles=nbytes / slow.bytes_per_cycle, slowest_hop=slow.kind)


def all_reduce_plan(nbytes: int, ring: list[int], target: Target) -> CollectivePlan:
    """The fastest of a ring, recursive doubling (small data) and, across machines, rings
    inside and between machines (fewer bytes on the slower links between machines)."""
    if len(ring) < 2:
        return CollectivePlan("all_reduce", "none", len(ring), 1, 0, 0, 0.0, 0.0)
    plans = [ring_plan("all_reduce", nbytes, ring, target), doubling_plan(nbytes, ring, target),
             hierarchical_plan(nbytes, ring, target)]
    return min((p for p in plans if p is not None), key=lambda p: p.cycles)


def replica_groups(op: Op, target: Target) -> list[list[int]]:
    """The op's groups of device ids; none given means one group of every IPU of the program."""
    groups = op.attributes.get("replica_groups")
    if isinstance(groups, list) and groups and all(isinstance(g, list) and g for g in groups):
        return [[int(d) for d in g] for g in groups]
    return [list(range(target.num_ipus))]


def _group_plan(op: Op, group: list[int], target: Target) -> CollectivePlan:
    kind, k = op.kind, len(group)
    if k < 2:
        return CollectivePlan(kind, "none", k, 1, 0, 0, 0.0, 0.0)
    if kind == "all_reduce":
        return all_reduce_plan(sum(t.nbytes for t in op.operands), group, target)
    if kind == "all_gather":
        return ring_plan(kind, sum(t.nbytes for t in op.results), group, target)
    if kind == "reduce_scatter":
        return ring_plan(kind, sum(t.nbytes for t in op.operands), group, target)
    if kind == "collective_broadcast":
        return broadcast_plan(sum(t.nbytes for t in op.operands), group, target)
    # all_to_all: every IPU sends a k-th of its data to each other IPU of the group.
    share = sum(t.nbytes for t in op.operands) / k
    return routed_plan(kind, [(a, b, share) for a in group for b in group], group, target)


def _flows(op: Op) -> list[tuple[int, int, float]]:
    """(source, destination, bytes) of each pair a collective permute sends."""
    nbytes = sum(t.nbytes for t in op.operands)
    return [(int(s), int(d), nbytes) for s, d in op.attributes.get("source_target_pairs") or []]


def permute_plan(ops: list[Op], target: Target) -> CollectivePlan:
    """Collective permutes sent in one exchange: their flows routed together, so that flows in
    opposite directions of a link (IPU-Links are full-duplex) take no longer than one."""
    flows = [f for op in ops for f in _flows(op)]
    ids = {i for s, d, _ in flows for i in (s, d)}
    ring = list(range(max([target.num_ipus, *[i + 1 for i in ids]])))
    return routed_plan("collective_permute", flows, ring, target)


def concurrent_permutes(ops: list[Op]) -> list[list[Op]]:
    """Groups of a block's collective permutes that go over the links in one exchange: each
    reads nothing the others of its group make, directly or through the ops between them (a
    halo swap's two directions). A permute that reads one starts a group of its own."""
    if sum(1 for op in ops if op.kind == "collective_permute") < 2:
        return []
    groups: list[list[Op]] = []
    current: list[Op] = []
    made: set[int] = set()  # values made from the current group's results
    for op in ops:
        reads = {v for o in op.walk() for v in o.operand_ids} | \
            {v for r in op.regions for v in r.result_ids}
        if op.kind == "collective_permute":
            if current and reads & made:
                groups.append(current)
                current, made = [], set()
            current.append(op)
            made.update(op.result_ids)
        elif reads & made:
            made.update(op.result_ids)
    groups.append(current)
    return [g for g in groups if len(g) > 1]


def plan_collective(op: Op, target: Target) -> CollectivePlan:
    """The link cost of one collective op; concurrent groups cost as their slowest one."""
    if op.kind == "collective_permute":
        return permute_plan([op], target)
    groups = replica_groups(op, target)
    plans = [_group_plan(op, g, target) for g in groups]
    worst = max(plans, key=lambda p: p.cycles)
    worst.num_groups = len(groups)
    return worst


def all_reduce_seconds(nbytes: int, num_ipus: int, target: Target) -> float:
    """Modelled time of an all-reduce of nbytes (per IPU) over devices 0..num_ipus-1."""
    return all_reduce_plan(nbytes, list(range(num_ipus)), target).cycles / target.clock_hz


def all_reduce_bound_seconds(nbytes: int, num_ipus: int, target: Target) -> float:
    """Link bandwidth bound: each IPU must send 2(k-1)/k of the data, over all of its links."""
    links = target.machine_links_per_ipu + target.pod_links_per_ipu
    return 2 * (num_ipus - 1) / num_ipus * nbytes / (links * target.ipu_link_bytes_per_s)
