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
    output_nbytes: tuple[int, ...]  # per output: bytes it holds on its device
    output_read_advance: tuple[np.ndarray, ...]  # per output: what reading it back adds to a clock
    devices: tuple[Any, ...]  # the PJRT handles of the devices this process runs, in order
    clocks: tuple[np.ndarray, ...]  # per device: its model clock (int64, device.CLOCK_FIELDS)
    advance: np.ndarray  # what one execution adds to each of those clocks (int64)
    run: Callable[..., Any]  # direct: run(*arrays) -> outputs; else XLA:CPU's execute_sharded
    direct: bool  # one device, outputs to watch, no tokens
    with_token: bool  # completion is XLA:CPU's token (several devices, or no outputs)
    assemble: Callable[[list[list[Any]]], list[Any]] | None  # several devices' arguments
    after: Callable[[float, float], None] | None  # the profiler's hook after(start_s, end_s)
    refusal: str | None  # why nothing may run this program (it does not fit)
