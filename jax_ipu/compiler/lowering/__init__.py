"""JAX lowering rules for platform "ipu", for the primitives whose only rules are per platform.

One module per concept (linalg, householder, callbacks, prng, topk); register() installs them."""

from __future__ import annotations

from jax_ipu import _internals as jx
from jax_ipu.compiler.lowering import callbacks, linalg, prng, topk
from jax_ipu.compiler.lowering.callbacks import HOST_CALLBACK_TARGETS, file_callback, host_callbacks
from jax_ipu.compiler.lowering.tracing import decomposition

__all__ = ["HOST_CALLBACK_TARGETS", "file_callback", "host_callbacks", "register"]


def register(platform: str) -> None:
    """Install the lowering rules for `platform` (a registered PJRT platform, here "ipu")."""
    for prim, rule in {**linalg.rules(), **prng.rules(), **topk.rules()}.items():
        jx.register_lowering(prim, decomposition(rule), platform=platform)
    # Callbacks are never cached: each lowering adds its callable to the module's list.
    for prim, rule in callbacks.rules().items():
        jx.register_lowering(prim, rule, platform=platform, cacheable=False)
