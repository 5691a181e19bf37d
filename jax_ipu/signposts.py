"""Signposts for names of Graphcore's JAX fork (jax 0.3.16 + Poplar) that jax-ipu replaces.

A script written for the fork calls `device.transfer_to_infeed(...)`, which jax 0.10's Device no
longer has (jax raises a bare AttributeError), or sets the fork's environment variables, which
nothing reads now. These say what to use instead (ipu/docs/migrating.md has each fork API next
to its replacement)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import jax

logger = logging.getLogger(__name__)

GUIDE = "ipu/docs/migrating.md"
# The fork's IpuDevice methods -> what replaces them here.
DEVICE_METHODS: dict[str, str] = {
    "transfer_to_infeed": (
        "jax 0.10 has no infeeds (jax.lax.infeed is gone too). Feed an on-device loop with "
        "jax_ipu.InfeedQueue(spec): queue.put(batch) on the host before the call, "
        "queue.get() inside the jitted loop"),
    "transfer_from_outfeed": (
        "jax 0.10 has no outfeeds (jax.lax.outfeed is gone too). Send values to the host with "
        "jax_ipu.OutfeedQueue(): queue.put(value) inside the jitted code, queue.drain() on the "
        "host after the call"),
}


def _signposted(original: Any) -> Any:
    def __getattr__(device: Any, name: str) -> Any:
        try:
            return original(device, name)
        except AttributeError:
            if name in DEVICE_METHODS and device.platform == "ipu":
                raise AttributeError(
                    f"{device!r} has no {name} (Graphcore's JAX fork had it): "
                    f"{DEVICE_METHODS[name]}. See {GUIDE}.") from None
            raise

    __getattr__.jax_ipu = True  # type: ignore[attr-defined]
    return __getattr__


def install() -> None:
    """Give jax's Device the signposts (idempotent). Names found on a device, and every name on
    other platforms' devices, behave as before."""
    original = jax.Device.__getattr__
    if not getattr(original, "jax_ipu", False):
        jax.Device.__getattr__ = _signposted(original)


# The fork's environment variables that jax-ipu does not read -> what replaces them.
FORK_ENVIRONMENT: dict[str, str] = {
    "TF_POPLAR_FLAGS": "set the IPU Model with JAX_IPU_USE_MODEL and JAX_IPU_MODEL_NUM_TILES, "
                       "and cache programs with jax's jax_compilation_cache_dir",
    "XLA_IPU_PLATFORM_DEVICE_COUNT": "set JAX_IPU_DEVICE_COUNT",
    "XLA_IPU_PLATFORM_NUM_IO_TILES": "the IPU Model has no I/O tiles",
    "XLA_IPU_PLATFORM_ALWAYS_REARRANGE_COPIES_ON_THE_HOST": "host copies are modelled as "
                                                            "Poplar's stream copies",
    "JAX_IPU_USE_LEGACY_CLIENT": "there is one client",
}
FORK_PREFIX = "XLA_IPU_PLATFORM_"


def warn_fork_environment(environ: Mapping[str, str] = os.environ) -> list[str]:
    """Log a warning for each of the fork's environment variables that is set (they are not
    read here, so what they set would be lost silently); return the warnings."""
    found = [name for name in sorted(environ)
             if name in FORK_ENVIRONMENT or name.startswith(FORK_PREFIX)]
    warnings = []
    for name in found:
        instead = FORK_ENVIRONMENT.get(name, "jax-ipu has no such option")
        warnings.append(f"{name} is set but jax-ipu does not read it (it was an option of "
                        f"Graphcore's JAX fork): {instead}. See {GUIDE}.")
        logger.warning(warnings[-1])
    return warnings
