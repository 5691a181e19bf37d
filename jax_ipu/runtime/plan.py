"""The plan Execute runs an executable by: the one type the C table reads (csrc/executable.c).

An IpuExecutable builds it once; C reads exactly these fields, by name, when the executable is
loaded, and the plugin checks C's list of names against this type when it starts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ExecutePlan:
    """How one execution runs on this process's devices, and what it leaves behind."""

    name: str  # the program's, for errors
    num_replicas: int
    num_partitions: int
    num_args: int  # arguments per device
    donated: tuple[int, ...]  # arguments XLA:CPU consumes (aliased to outputs, or donors)
    output_types: tuple[int, ...]  # per output: its PJRT element type
    output_dims: tuple[tuple[int, ...], ...]
    output_nbytes: tuple[int, ...]  # per output: bytes it holds in its memory
    # per output: what reading it back adds to a clock (its memory kind's read_advance)
    output_read_advance: tuple[np.ndarray, ...]
    # per output: laid out other than row-major (a user's Format): never read in place
    output_reordered: tuple[bool, ...]
    devices: tuple[Any, ...]  # the PJRT handles of the devices this process runs, in order
    # per device (in `devices` order), per output: the PJRT handle of the memory it lands in
    output_memories: tuple[tuple[Any, ...], ...]
    clocks: tuple[np.ndarray, ...]  # per device: its model clock (int64, device.CLOCK_FIELDS)
    advance: np.ndarray  # what one execution adds to each of those clocks (int64)
    run: Callable[..., Any]  # direct: run(*arrays) -> outputs; else XLA:CPU's execute_sharded
    direct: bool  # one device, outputs to watch, no tokens
    with_token: bool  # completion is XLA:CPU's token (several devices, or no outputs)
    # a run can fail inside XLA:CPU (host callbacks, custom calls, other processes' devices):
    # its outputs are asked for its error even when they are ready at once
    may_fail: bool
    assemble: Callable[[list[list[Any]]], list[Any]] | None  # several devices' arguments
    after: Callable[[float, float], None] | None  # the profiler's hook after(start_s, end_s)
    refusal: str | None  # why nothing may run this program (it does not fit)
