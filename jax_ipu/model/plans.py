"""Candidate plans of one op and the choice between them, as PopLibs' planners choose.

A planner lists a few ways to spread an op over tiles (families: which operand is split,
broadcast or reduced in a second phase); choose() takes the cheapest whose temporaries fit in
the target's available memory proportion of a tile and names the best plan of another family
as the runner-up, with why it lost."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from jax_ipu.model.targets import Target


@dataclass(frozen=True)
class Plan:
    """One way to run an op: its cycles on the busiest tile and its temporaries per tile.

    `family` groups plans that differ only in split sizes (e.g. "lookups split, table
    broadcast"); `detail` gives the sizes. Exchange and compute steps are counted for the
    code they add to each tile (model/memory.py)."""

    family: str
    detail: str
    compute_cycles: float
    exchange_cycles: float
    syncs: int
    tiles: int
    temp_bytes_per_tile: int
    exchange_steps: int = 0
    compute_steps: int = 1
    # what the planner believes the plan costs, when that differs from what the chip does
    # (PopLibs' estimates leave out per-region overheads and include biases): plans are
    # chosen by it, as Poplar chooses them, and charged by the cycles above
    estimate: float | None = None
    messages: int = 0  # exchange instructions a tile runs per exchange step (0: one each way)
    kernel_positions: int = 1  # kernel positions an AMP vertex's worklists cover

    def cycles(self, target: Target) -> float:
        return self.compute_cycles + self.exchange_cycles + self.syncs * target.sync_cycles

    def planned(self, target: Target) -> float:
        """The cycles the planner ranks the plan by."""
        return self.cycles(target) if self.estimate is None else self.estimate

    @property
    def name(self) -> str:
        return f"{self.family} ({self.detail})" if self.detail else self.family


@dataclass(frozen=True)
class Choice:
    """The plan an op runs with, and the best plan of another family with why it lost."""

    chosen: Plan
    runner_up: Plan | None
    why: str
    fits: bool  # whether the chosen plan's temporaries fit the memory proportion

    def describe(self, target: Target) -> str:
        text = f"{self.chosen.name}: {self.chosen.cycles(target):,.0f} cycles"
        if not self.fits:
            text += "; no plan fits the memory proportion, so the one needing least memory"
        return text

    def alternative(self, target: Target) -> str:
        if self.runner_up is None:
            return ""
        return f"{self.runner_up.name}: {self.runner_up.cycles(target):,.0f} cycles; " \
            f"lost: {self.why}"


def budget(target: Target) -> float:
    """Bytes of temporaries a plan may take on one tile (PopLibs' availableMemoryProportion)."""
    return target.available_memory_proportion * target.bytes_per_tile


def choose(plans: Iterable[Plan], target: Target) -> Choice:
    """The plan the planner ranks cheapest among those that fit; if none fits, the one
    needing least memory."""
    candidates = list(plans)
    limit = budget(target)
    fitting = [p for p in candidates if p.temp_bytes_per_tile <= limit]
    if fitting:
        best = min(fitting, key=lambda p: (p.planned(target), p.temp_bytes_per_tile))
    else:
        best = min(candidates, key=lambda p: (p.temp_bytes_per_tile, p.planned(target)))
    others = [p for p in candidates if p.family != best.family]
    if not others:
        return Choice(best, None, "", bool(fitting))
    rival = min(others, key=lambda p: p.planned(target))
    if rival.temp_bytes_per_tile > limit and fitting:
        why = f"needs {rival.temp_bytes_per_tile:,} B of temporaries a tile, over the " \
              f"{limit:,.0f} B the memory proportion ({target.available_memory_proportion:g}) " \
              "allows"
    elif not fitting:
        why = f"needs {rival.temp_bytes_per_tile:,} B a tile, more than the chosen " \
              f"{best.temp_bytes_per_tile:,} B"
    else:
        mine, theirs = best.planned(target), rival.planned(target)
        judged = "estimated " if rival.estimate is not None else ""
        why = f"{judged}{theirs - mine:,.0f} cycles more ({theirs / max(1.0, mine):.2f}x)"
    return Choice(best, rival, why, bool(fitting))


def splits(extent: int, limit: int) -> list[int]:
    """Candidate ways to split a dimension of `extent` over at most `limit` tiles: powers of
    two, the whole extent and the limit itself (PopLibs searches all; these keep it small)."""
    top = max(1, min(limit, extent))
    values = {1, top}
    p = 2
    while p < top:
        values.add(p)
        p *= 2
    return sorted(values)
