"""ResNet-50 training as a JAX program, for the model's memory verdicts (tests and bench).

Bottleneck blocks in NHWC, batch normalisation, SGD with momentum and gradient accumulation,
optionally recomputing each block (jax.checkpoint), as Graphcore's published configuration
(G-8 in jax_ipu/model/targets.py) trains it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jaxlib.mlir.dialects import stablehlo

from jax_ipu.model import ProgramReport, get_target
from tests._lowering import PJRT_ARTIFACT_VERSION, judge

S = jax.ShapeDtypeStruct

STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # width, blocks, stride
S = jax.ShapeDtypeStruct


def _conv(x: Any, w: Any, stride: int = 1) -> Any:
    pad = (w.shape[0] - 1) // 2
    return jax.lax.conv_general_dilated(x, w, (stride, stride), [(pad, pad), (pad, pad)],
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _norm(x: Any, p: dict[str, Any]) -> Any:
    mean = x.mean((0, 1, 2), keepdims=True)
    var = ((x - mean) ** 2).mean((0, 1, 2), keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * p["scale"] + p["bias"]


def resnet50_params(dtype: Any) -> dict[str, Any]:
    """Shapes of ResNet-50's parameters (bottleneck blocks, 25.6M weights)."""
    def conv(k: int, cin: int, cout: int) -> dict[str, Any]:
        return {"w": S((k, k, cin, cout), dtype), "scale": S((cout,), dtype),
                "bias": S((cout,), dtype)}
    blocks, cin = [], 64
    for width, count, stride in STAGES:
        for i in range(count):
            block = {"c1": conv(1, cin, width), "c2": conv(3, width, width),
                     "c3": conv(1, width, 4 * width)}
            if i == 0:
                block["down"] = conv(1, cin, 4 * width)
            blocks.append((block, stride if i == 0 else 1))
            cin = 4 * width
    return {"stem": conv(7, 3, 64), "blocks": [b for b, _ in blocks],
            "fc": S((2048, 1000), dtype)}


def _strides() -> list[int]:
    return [stride if i == 0 else 1 for _, count, stride in STAGES for i in range(count)]


def _block(x: Any, p: dict[str, Any], stride: int) -> Any:
    h = jax.nn.relu(_norm(_conv(x, p["c1"]["w"]), p["c1"]))
    h = jax.nn.relu(_norm(_conv(h, p["c2"]["w"], stride), p["c2"]))
    h = _norm(_conv(h, p["c3"]["w"]), p["c3"])
    if "down" in p:
        x = _norm(_conv(x, p["down"]["w"], stride), p["down"])
    return jax.nn.relu(x + h)


def resnet50_step(recompute: bool) -> Callable:
    """One micro-batch of training with gradient accumulation: the loss's gradient is added
    into the accumulators, and SGD with momentum applies them (the published step)."""
    block = jax.checkpoint(_block, static_argnums=2) if recompute else _block

    def loss(params: Any, images: Any, labels: Any) -> Any:
        x = images.astype(params["fc"].dtype) / 255
        x = jax.nn.relu(_norm(_conv(x, params["stem"]["w"], 2), params["stem"]))
        x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
        for p, stride in zip(params["blocks"], _strides(), strict=True):
            x = block(x, p, stride)
        logits = x.mean((1, 2)) @ params["fc"]
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits.astype(jnp.float32)),
                                             labels[:, None], axis=1))

    def step(params: Any, momentum: Any, accum: Any, images: Any, labels: Any) -> Any:
        grads = jax.grad(loss)(params, images, labels)
        accum = jax.tree.map(lambda a, g: a + g, accum, grads)
        momentum = jax.tree.map(lambda m, a: 0.9 * m + a, momentum, accum)
        params = jax.tree.map(lambda p, m: p - 0.01 * m, params, momentum)
        return params, momentum, accum
    return step


def judged(batch: int, recompute: bool, proportion: float, version: str = "ipu2"
           ) -> ProgramReport:
    """The model's report of one training step on one IPU, out of memory allowed."""
    params = resnet50_params(jnp.float16)
    images, labels = S((batch, 224, 224, 3), jnp.uint8), S((batch,), jnp.int32)
    text = jax.jit(resnet50_step(recompute), donate_argnums=(0, 1, 2)).lower(
        params, params, params, images, labels).as_text(debug_info=True)
    code = stablehlo.serialize_portable_artifact_str(text, PJRT_ARTIFACT_VERSION)
    return judge(code, get_target(version, None, proportion), allow_out_of_memory=True)[1]
