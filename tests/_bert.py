"""BERT as a JAX program, for the model's memory verdicts (tests and bench).

The encoder of Graphcore's PopART BERT (graphcore/examples, nlp/bert/popart; G-9 in
jax_ipu/model/targets.py): word, position and token-type embeddings, layers of self-attention
and a feed-forward block with layer norms, and the SQuAD head (start and end logits), in
fp16. Inference runs the whole encoder on one IPU, as the published SQuAD inference
configurations do; training adds the gradients and the Adam optimizer's two moments."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from jaxlib.mlir.dialects import stablehlo

from jax_ipu.model import ProgramReport, get_target
from tests._lowering import PJRT_ARTIFACT_VERSION, judge

S = jax.ShapeDtypeStruct


@dataclass(frozen=True)
class Bert:
    """One published model shape (layers, hidden width, heads; vocab_length 30400 as the
    configurations set it; the feed-forward block 4 times the hidden width)."""

    layers: int
    hidden: int
    heads: int
    vocab: int = 30400
    positions: int = 512


BASE = Bert(12, 768, 12)
LARGE = Bert(24, 1024, 16)


def bert_params(model: Bert, dtype: Any) -> dict[str, Any]:
    """Shapes of the model's parameters (BERT-Large: 334M, BERT-Base: 109M)."""
    h, f = model.hidden, 4 * model.hidden

    def norm() -> dict[str, Any]:
        return {"scale": S((h,), dtype), "bias": S((h,), dtype)}

    def layer() -> dict[str, Any]:
        return {"qkv": S((h, 3 * h), dtype), "qkv_b": S((3 * h,), dtype),
                "out": S((h, h), dtype), "out_b": S((h,), dtype), "norm1": norm(),
                "up": S((h, f), dtype), "up_b": S((f,), dtype), "down": S((f, h), dtype),
                "down_b": S((h,), dtype), "norm2": norm()}
    return {"word": S((model.vocab, h), dtype), "position": S((model.positions, h), dtype),
            "token_type": S((2, h), dtype), "norm": norm(),
            "layers": [layer() for _ in range(model.layers)],
            "squad": S((h, 2), dtype), "squad_b": S((2,), dtype)}


def _norm(x: Any, p: dict[str, Any]) -> Any:
    x32 = x.astype(jnp.float32)
    mean = x32.mean(-1, keepdims=True)
    var = ((x32 - mean) ** 2).mean(-1, keepdims=True)
    return ((x32 - mean) * jax.lax.rsqrt(var + 1e-5)).astype(x.dtype) * p["scale"] + p["bias"]


def _layer(x: Any, p: dict[str, Any], heads: int) -> Any:
    b, s, h = x.shape
    q, k, v = jnp.split(x @ p["qkv"] + p["qkv_b"], 3, axis=-1)
    q, k, v = (t.reshape(b, s, heads, h // heads) for t in (q, k, v))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(h // heads).astype(x.dtype)
    attention = jax.nn.softmax(scores.astype(jnp.float32), axis=-1).astype(x.dtype)
    context = jnp.einsum("bhqk,bkhd->bqhd", attention, v).reshape(b, s, h)
    x = _norm(x + context @ p["out"] + p["out_b"], p["norm1"])
    up = jax.nn.gelu(x @ p["up"] + p["up_b"])
    return _norm(x + up @ p["down"] + p["down_b"], p["norm2"])


def squad_logits(model: Bert) -> Callable:
    """The SQuAD model: token ids and token types in, start and end logits out."""
    def forward(params: Any, ids: Any, types: Any) -> Any:
        positions = jnp.arange(ids.shape[1])
        x = jnp.take(params["word"], ids, axis=0) + params["position"][positions] + \
            jnp.take(params["token_type"], types, axis=0)
        x = _norm(x, params["norm"])
        for p in params["layers"]:
            x = _layer(x, p, model.heads)
        return x @ params["squad"] + params["squad_b"]
    return forward


def squad_training_step(model: Bert) -> Callable:
    """One step of SQuAD fine-tuning with Adam: the loss's gradients and both moments."""
    forward = squad_logits(model)

    def loss(params: Any, ids: Any, types: Any, starts: Any, ends: Any) -> Any:
        logits = forward(params, ids, types).astype(jnp.float32)
        log_p = jax.nn.log_softmax(logits, axis=1)
        picked = jnp.take_along_axis(log_p[..., 0], starts[:, None], axis=1) + \
            jnp.take_along_axis(log_p[..., 1], ends[:, None], axis=1)
        return -picked.mean()

    def step(params: Any, m: Any, v: Any, ids: Any, types: Any, starts: Any, ends: Any
             ) -> Any:
        grads = jax.grad(loss)(params, ids, types, starts, ends)
        m = jax.tree.map(lambda a, g: 0.9 * a + 0.1 * g, m, grads)
        v = jax.tree.map(lambda a, g: 0.999 * a + 0.001 * g * g, v, grads)
        params = jax.tree.map(lambda p, a, b: p - 5e-5 * a / (jnp.sqrt(b) + 1e-6), params,
                              m, v)
        return params, m, v
    return step


def judged(model: Bert, batch: int, sequence: int, training: bool, proportion: float = 0.6,
           version: str = "ipu2") -> ProgramReport:
    """The model's report of one SQuAD inference batch or training step on one IPU, out of
    memory allowed. Parameters stay on the device (inference) or are donated (training)."""
    params = bert_params(model, jnp.float16)
    tokens = S((batch, sequence), jnp.int32)
    if training:
        positions = S((batch,), jnp.int32)
        lowered = jax.jit(squad_training_step(model), donate_argnums=(0, 1, 2)).lower(
            params, params, params, tokens, tokens, positions, positions)
    else:
        lowered = jax.jit(squad_logits(model)).lower(params, tokens, tokens)
    text = lowered.as_text(debug_info=True)
    code = stablehlo.serialize_portable_artifact_str(text, PJRT_ARTIFACT_VERSION)
    return judge(code, get_target(version, None, proportion), allow_out_of_memory=True)[1]
