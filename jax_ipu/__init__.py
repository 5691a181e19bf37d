"""jax-ipu: JAX on Graphcore IPU as a PJRT plugin, running on the IPU Model.

Importing is optional (JAX finds the plugin by itself); this module adds the model's reports and
the infeed/outfeed queues of on-device training loops."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jax_ipu._version import __version__
from jax_ipu.feeds import InfeedQueue, OutfeedQueue
from jax_ipu.plugin import register_flags

__all__ = ["InfeedQueue", "ModelClock", "OutfeedQueue", "__version__", "clock", "memory_stats",
           "report"]

# jax.config.update("jax_ipu_...", v) needs the flags registered; jax itself only discovers the
# plugin when a backend is first used.
register_flags()


def report(program: Any) -> Any:
    """The IPU Model's ProgramReport of a program: memory per tile, liveness, out-of-memory
    tiles, and cycles per op (see jax_ipu.model.report.ProgramReport).

    `program` is what `jax.jit(f).lower(*args).compile()` returns for ipu (its report from the
    compile), or what `.lower(*args)` returns for any platform: the model then judges that
    lowered program on the target the jax_ipu_* flags choose, without compiling or running
    it, so a cpu program can be asked what it would cost on an IPU."""
    if hasattr(program, "runtime_executable"):
        from jax_ipu.remote.client import is_remote, remote_report

        if is_remote(program.runtime_executable().client):
            return remote_report(program)
        from jax_ipu.runtime.client import find_executable

        fingerprint = program.runtime_executable().fingerprint
        if isinstance(fingerprint, bytes):
            fingerprint = fingerprint.decode()
        return find_executable(fingerprint).report
    from jax_ipu import config
    from jax_ipu.compiler.judge import judge_program
    from jax_ipu.compiler.program import read_program

    return judge_program(read_program(program.as_text(debug_info=True)), config.target(),
                         allow_out_of_memory=True)


@dataclass(frozen=True)
class ModelClock:
    """Model time on one device: what the executions and host transfers so far would have taken
    on the IPU, in cycles of its clock and in seconds, and where the cycles went."""

    device_id: int
    cycles: int
    seconds: float
    breakdown: dict[str, int]


def clock(device: Any = None) -> ModelClock:
    """The model clock of an ipu device (default: the first ipu device)."""
    import jax

    from jax_ipu.runtime.client import find_device

    device = jax.devices("ipu")[0] if device is None else device
    runtime_device = find_device(device.id)
    return ModelClock(device.id, runtime_device.cycles, runtime_device.seconds,
                      runtime_device.clock_breakdown())


def memory_stats(device: Any = None) -> dict[str, dict[str, int | None]]:
    """Bytes held in each memory kind of an ipu device (default: the first ipu device):
    {"device": tile memory, "pinned_host": Streaming Memory, "unpinned_host": host memory},
    each {bytes_in_use, peak_bytes_in_use, num_allocs, largest_alloc_size, bytes_limit}
    (bytes_limit None: no modelled limit). device.memory_stats() reports tile memory in its
    usual fields and Streaming Memory in bytes_reserved, peak_bytes_reserved and
    bytes_reservable_limit."""
    import dataclasses

    import jax

    from jax_ipu.runtime.client import find_device

    device = jax.devices("ipu")[0] if device is None else device
    return {kind: dataclasses.asdict(memory.stats)
            for kind, memory in find_device(device.id).memories.items()}
