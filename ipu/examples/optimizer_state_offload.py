"""Train a small transformer with Adam whose optimizer state lives in Streaming Memory.

Graphcore kept BERT-Large's optimizer state in the IPU-Machine's Streaming Memory so that the
model fitted in tile memory. In JAX that is a memory kind: the state is a pinned_host array,
each step brings one tensor's moments onto the tiles for its update and sends them back. The
script compiles the same training step twice, state on the tiles and state offloaded, prints
the IPU Model's verdict and step time for each, and trains with the one that fits."""

from __future__ import annotations

import argparse
import json
import math
import os
from typing import Any

import _common
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import SingleDeviceSharding

Params = dict[str, Any]

# Small enough to train in seconds; the IPU Model gets few tiles so that Adam's state (twice the
# parameters) does not fit beside the parameters, gradients and activations.
DEFAULT_TILES = 64


def init_params(key: jax.Array, vocab: int, width: int, layers: int, seq: int) -> Params:
    """A decoder-only transformer: token and position embeddings, `layers` blocks of causal
    self-attention and an MLP (4x wide), a final layer norm; the output reuses the embedding."""
    keys = iter(jax.random.split(key, 2 + 4 * layers))

    def dense(n_in: int, n_out: int) -> jax.Array:
        return jax.random.normal(next(keys), (n_in, n_out), jnp.float32) / math.sqrt(n_in)

    params: Params = {"embed": dense(vocab, width) * math.sqrt(vocab / width),
                      "position": dense(seq, width) * 0.1, "final_norm": jnp.ones(width)}
    for i in range(layers):
        params[f"block{i}"] = {
            "norm1": jnp.ones(width), "qkv": dense(width, 3 * width), "out": dense(width, width),
            "norm2": jnp.ones(width), "up": dense(width, 4 * width),
            "down": dense(4 * width, width),
        }
    return params


def _norm(x: jax.Array, scale: jax.Array) -> jax.Array:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * scale


def forward(params: Params, tokens: jax.Array, heads: int) -> jax.Array:
    """Next-token logits for every position of `tokens` [batch, seq]."""
    batch, seq = tokens.shape
    x = params["embed"][tokens] + params["position"][:seq]
    causal = jnp.tril(jnp.ones((seq, seq), bool))
    for name in sorted(k for k in params if k.startswith("block")):
        block = params[name]
        q, k, v = jnp.split(_norm(x, block["norm1"]) @ block["qkv"], 3, axis=-1)
        q, k, v = (t.reshape(batch, seq, heads, -1) for t in (q, k, v))
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
        weights = jax.nn.softmax(jnp.where(causal, scores, -1e9), axis=-1)
        attended = jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(batch, seq, -1)
        x = x + attended @ block["out"]
        x = x + jax.nn.gelu(_norm(x, block["norm2"]) @ block["up"]) @ block["down"]
    return _norm(x, params["final_norm"]) @ params["embed"].T


def loss_fn(params: Params, tokens: jax.Array, heads: int) -> jax.Array:
    logits = forward(params, tokens[:, :-1], heads)
    targets = tokens[:, 1:]
    picked = jnp.take_along_axis(jax.nn.log_softmax(logits), targets[..., None], axis=-1)
    return -picked.mean()


def adam_update(p: jax.Array, g: jax.Array, m: jax.Array, v: jax.Array, step: jax.Array,
                lr: float) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One Adam step of one tensor (beta1 0.9, beta2 0.999)."""
    m = 0.9 * m + 0.1 * g
    v = 0.999 * v + 0.001 * g * g
    m_hat = m / (1 - 0.9**step)
    v_hat = v / (1 - 0.999**step)
    return p - lr * m_hat / (jnp.sqrt(v_hat) + 1e-8), m, v


def make_step(heads: int, lr: float, state_home: SingleDeviceSharding | None,
              tiles: SingleDeviceSharding) -> Any:
    """The training step: gradients, then Adam tensor by tensor. With `state_home` (a pinned_host
    sharding) each tensor's moments come onto the tiles for its update and go back at once, so
    the tiles never hold more than one tensor's state."""

    def step(params: Params, state: tuple[Params, Params], count: jax.Array, tokens: jax.Array
             ) -> tuple[Params, tuple[Params, Params], jax.Array, jax.Array]:
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens, heads)
        count = count + 1
        leaves, tree = jax.tree.flatten(params)
        new_p, new_m, new_v = [], [], []
        for p, g, m, v in zip(leaves, jax.tree.leaves(grads), *map(jax.tree.leaves, state),
                              strict=True):
            if state_home is not None:
                m, v = jax.device_put((m, v), tiles)
            p, m, v = adam_update(p, g, m, v, count, lr)
            if state_home is not None:
                m, v = jax.device_put((m, v), state_home)
            new_p.append(p)
            new_m.append(m)
            new_v.append(v)
        state = (jax.tree.unflatten(tree, new_m), jax.tree.unflatten(tree, new_v))
        return jax.tree.unflatten(tree, new_p), state, count, loss

    kinds = None if state_home is None else (tiles, state_home, tiles, tiles)
    outs = None if state_home is None else (tiles, state_home, tiles, tiles)
    return jax.jit(step, in_shardings=kinds, out_shardings=outs, donate_argnums=(0, 1, 2))


def batches(rng: np.random.Generator, vocab: int, seq: int, batch: int) -> np.ndarray:
    """Sequences that count up from a random start by a random stride (mod vocab): the next
    token follows from the ones before it."""
    start = rng.integers(0, vocab, (batch, 1))
    stride = rng.integers(1, 4, (batch, 1))
    return ((start + stride * np.arange(seq + 1)) % vocab).astype(np.int32)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    _common.add_common_args(parser)
    parser.add_argument("--steps", type=int, default=60, help="training steps")
    parser.add_argument("--layers", type=int, default=4, help="transformer blocks")
    parser.add_argument("--width", type=int, default=256, help="model width")
    parser.add_argument("--heads", type=int, default=4, help="attention heads")
    parser.add_argument("--vocab", type=int, default=64, help="vocabulary size")
    parser.add_argument("--seq", type=int, default=16, help="sequence length")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate")
    parser.add_argument("--tiles", type=int, default=DEFAULT_TILES,
                        help="IPU Model tiles per device (sets JAX_IPU_MODEL_NUM_TILES unless "
                             "it is set already; 0: the full chip)")
    return parser.parse_args(argv)


def configure_ipu(tiles: int) -> None:
    """Few tiles, and Poplar's debug.allowOutOfMemory, so that the program that does not fit
    still compiles and reports (nothing runs it). Set before jax starts the ipu backend."""
    os.environ.setdefault("JAX_IPU_MODEL_NUM_TILES", str(tiles))
    options = json.loads(os.environ.get("POPLAR_ENGINE_OPTIONS") or "{}")
    options.setdefault("debug.allowOutOfMemory", "true")
    os.environ["POPLAR_ENGINE_OPTIONS"] = json.dumps(options)


def verdict(compiled: jax.stages.Compiled, device: jax.Device, label: str,
            plot_dir: str | None) -> dict[str, float] | None:
    """The model's view of one variant: fits or not, tile and Streaming Memory, time per step."""
    figures = _common.model_view(compiled, device, label, plot_dir)
    if figures is None:
        return None
    import jax_ipu

    report = jax_ipu.report(compiled)
    mem, cyc = report.memory, report.cycles
    print(f"  Streaming Memory: {mem.streaming_memory_bytes / _common.MIB:.2f} MiB held; "
          f"moves {cyc.streaming_setup + cyc.streaming:,.0f} cycles per step "
          f"(set-up {cyc.streaming_setup:,.0f}, bytes over the gateway {cyc.streaming:,.0f})")
    status = "FITS" if not mem.out_of_memory else (
        f"DOES NOT FIT: {len(mem.tiles_out_of_memory)} of {report.target.num_tiles} tiles out "
        f"of memory (fullest {mem.max_tile_bytes / _common.KIB:.0f} KiB of "
        f"{report.target.bytes_per_tile / _common.KIB:.0f} KiB)")
    print(f"  verdict: {status}; {report.seconds * 1e3:.3f} ms per step at the chip's clock")
    return {**figures, "fits": float(not mem.out_of_memory),
            "streaming_mib": mem.streaming_memory_bytes / _common.MIB}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.platform == "ipu":
        configure_ipu(args.tiles)
    device = _common.device_for(args.platform)
    tiles = SingleDeviceSharding(device)
    state_home = SingleDeviceSharding(device, memory_kind="pinned_host")

    with jax.default_device(jax.devices("cpu")[0]):
        params = init_params(jax.random.key(args.seed), args.vocab, args.width, args.layers,
                             args.seq)
    n_params = sum(p.size for p in jax.tree.leaves(params))
    print(f"transformer: {args.layers} blocks of width {args.width}, {n_params:,} parameters "
          f"({4 * n_params / _common.MIB:.1f} MiB), Adam state {8 * n_params / _common.MIB:.1f}"
          f" MiB (two float32 moments per parameter)")
    zeros = jax.tree.map(jnp.zeros_like, params)
    rng = np.random.default_rng(args.seed)
    example = batches(rng, args.vocab, args.seq, args.batch_size)
    count = jnp.zeros((), jnp.float32)

    on_tiles = make_step(args.heads, args.lr, None, tiles)
    offloaded = make_step(args.heads, args.lr, state_home, tiles)
    shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=tiles),
                          (params, (zeros, zeros), count, example))
    home = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=state_home),
                        (zeros, zeros))
    plain = verdict(on_tiles.lower(*shapes).compile(), device, "Adam state on the tiles",
                    args.plot)
    offload_compiled = offloaded.lower(shapes[0], home, shapes[2], shapes[3]).compile()
    moved = verdict(offload_compiled, device, "Adam state in Streaming Memory", args.plot)

    params = jax.device_put(params, tiles)
    state = jax.device_put((zeros, zeros), state_home)
    count = jax.device_put(count, tiles)
    start_clock = _common.model_clock(device)
    losses = []
    for step in _common.progress(range(args.steps), desc="training", leave=False):
        tokens = jax.device_put(batches(rng, args.vocab, args.seq, args.batch_size), tiles)
        params, state, count, loss = offload_compiled(params, state, count, tokens)
        losses.append(float(loss))
        if step % 20 == 0 or step == args.steps - 1:
            _common.note(f"step {step:4d}  loss {losses[-1]:.4f}")
    end_clock = _common.model_clock(device)
    state_kind = state[0]["embed"].sharding.memory_kind
    print(f"after training: loss {losses[0]:.3f} -> {losses[-1]:.3f}; the Adam state is in "
          f"memory kind {state_kind}")
    _common.plot_curves(args.plot, "optimizer_state_offload_loss.png",
                        "Transformer with Adam state in Streaming Memory", "step",
                        {"training loss": (range(len(losses)), losses)},
                        ylabel="cross-entropy")

    figures: dict[str, object] = {"platform": args.platform, "steps": args.steps,
                                  "first_loss": losses[0], "final_loss": losses[-1],
                                  "state_kind": state_kind}
    if plain is not None and moved is not None and start_clock is not None:
        per_step = (end_clock - start_clock) / args.steps
        print(f"model clock over training: {per_step * 1e3:.3f} ms per step with its host "
              "transfers (the offloaded step)")
        figures.update(onchip_fits=int(plain["fits"]), offload_fits=int(moved["fits"]),
                       onchip_step_ms=plain["seconds"] * 1e3,
                       offload_step_ms=moved["seconds"] * 1e3,
                       onchip_tile_kib=plain["max_tile_bytes"] / _common.KIB,
                       offload_tile_kib=moved["max_tile_bytes"] / _common.KIB,
                       streaming_mib=moved["streaming_mib"], clock_step_ms=per_step * 1e3)
    _common.summary("optimizer_state_offload", **figures)


if __name__ == "__main__":
    main()
