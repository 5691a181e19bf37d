"""Program-level validation set: whole programs with the IPU Model's figure for each, and the
source or invariant each must keep (issue 25). Whole-program hardware figures are held out.

Each program is lowered for ipu and judged by the model alone (no XLA:CPU build). Invariants
compare programs of the set: the .at[].set and pad forms of a stencil within 1.5x of each other
in cycles and busiest tile; a donated loop no larger than its step outside the loop; QR not
slower than its column count times a fused Householder column (the model's figure for one trip
of XLA's unblocked Householder loop). --json writes the figures."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

import jax_ipu

F32 = jnp.float32
STEPS = 10


def spec(*shape: int, dtype: Any = F32) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, dtype)


@dataclass(frozen=True)
class Entry:
    """One program: how to build it (function, argument specs, jit options), and the source
    or invariant its figure is checked against."""

    name: str
    build: Callable[[], tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]]
    check: str


# --- the programs ------------------------------------------------------------------------------
def _lap2(u: Any) -> Any:
    return u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4 * u[1:-1, 1:-1]


def _lap3(u: Any) -> Any:
    c = u[1:-1, 1:-1, 1:-1]
    return (u[2:, 1:-1, 1:-1] + u[:-2, 1:-1, 1:-1] + u[1:-1, 2:, 1:-1] + u[1:-1, :-2, 1:-1]
            + u[1:-1, 1:-1, 2:] + u[1:-1, 1:-1, :-2] - 6 * c)


def stencil2d(form: str) -> Callable[[], Any]:
    def step(u: Any) -> Any:
        new = u[1:-1, 1:-1] + 0.1 * _lap2(u)
        if form == "at":
            return u.at[1:-1, 1:-1].set(new)
        if form == "dus":
            return lax.dynamic_update_slice(u, new, (1, 1))
        return jnp.pad(new, 1)
    return lambda: (step, (spec(2000, 2000),), {})


def heat3d(form: str) -> Callable[[], Any]:
    def step(u: Any) -> Any:
        new = u[1:-1, 1:-1, 1:-1] + 0.1 * _lap3(u)
        return u.at[1:-1, 1:-1, 1:-1].set(new) if form == "at" else jnp.pad(new, 1)

    def run(u: Any) -> Any:
        return lax.fori_loop(0, STEPS, lambda i, u: step(u), u)
    return lambda: (run, (spec(160, 160, 160),), {"donate_argnums": 0})


def _gray_scott(state: tuple[Any, Any]) -> tuple[Any, Any]:
    u, v = state

    def lap(x: Any) -> Any:
        return (jnp.roll(x, 1, 0) + jnp.roll(x, -1, 0) + jnp.roll(x, 1, 1) + jnp.roll(x, -1, 1)
                - 4 * x)
    uvv = u * v * v
    return (u + 0.16 * lap(u) - uvv + 0.035 * (1 - u),
            v + 0.08 * lap(v) + uvv - 0.095 * v)


def reaction_diffusion(loop: bool) -> Callable[[], Any]:
    def run(u: Any, v: Any) -> Any:
        if loop:
            return lax.fori_loop(0, STEPS, lambda i, s: _gray_scott(s), (u, v))
        return _gray_scott((u, v))
    return lambda: (run, (spec(1024, 1024), spec(1024, 1024)), {"donate_argnums": (0, 1)})


def qr() -> Any:
    return jnp.linalg.qr, (spec(256, 256),), {}


def qr_column() -> Any:
    """XLA's unblocked Householder QR loop, one column a trip, as the model fuses it."""
    from jax_ipu.compiler.lowering import householder

    return householder.geqrf, (spec(256, 256),), {}


WIDTH, HEADS, SEQ, BATCH = 256, 4, 128, 8


def _norm(x: Any) -> Any:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * lax.rsqrt(var + 1e-5)


def transformer_block() -> Any:
    def block(x: Any, qkv: Any, out: Any, up: Any, down: Any) -> Any:
        q, k, v = jnp.split(_norm(x) @ qkv, 3, axis=-1)
        heads = lambda t: t.reshape(BATCH, SEQ, HEADS, -1).transpose(0, 2, 1, 3)  # noqa: E731
        q, k, v = heads(q), heads(k), heads(v)
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(WIDTH // HEADS)
        weights = jax.nn.softmax(jnp.where(jnp.tril(jnp.ones((SEQ, SEQ), bool)), scores,
                                           -1e9), axis=-1)
        x = x + (weights @ v).transpose(0, 2, 1, 3).reshape(BATCH, SEQ, WIDTH) @ out
        return x + jax.nn.gelu(_norm(x) @ up) @ down
    return block, (spec(BATCH, SEQ, WIDTH), spec(WIDTH, 3 * WIDTH), spec(WIDTH, WIDTH),
                   spec(WIDTH, 4 * WIDTH), spec(4 * WIDTH, WIDTH)), {}


def _conv(x: Any, w: Any) -> Any:
    return lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))


def cnn_inference() -> Any:
    def net(x: Any, w1: Any, w2: Any, w3: Any, head: Any) -> Any:
        x = jax.nn.relu(_conv(x, w1))
        x = lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        x = jax.nn.relu(_conv(x, w2))
        x = lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        x = jax.nn.relu(_conv(x, w3))
        return jax.nn.softmax(x.mean((1, 2)) @ head)
    return net, (spec(32, 32, 32, 3), spec(3, 3, 3, 64), spec(3, 3, 64, 128),
                 spec(3, 3, 128, 256), spec(256, 10)), {}


def training_step(loop: bool) -> Callable[[], Any]:
    def loss(params: Any, x: Any, y: Any) -> Any:
        h = jax.nn.gelu(x @ params["w1"])
        return jnp.mean((h @ params["w2"] - y) ** 2)

    def step(state: Any, x: Any, y: Any) -> Any:
        params, momentum = state
        grads = jax.grad(loss)(params, x, y)
        momentum = jax.tree.map(lambda m, g: 0.9 * m + g, momentum, grads)
        return jax.tree.map(lambda p, m: p - 1e-3 * m, params, momentum), momentum

    def run(params: Any, momentum: Any, x: Any, y: Any) -> Any:
        if loop:
            return lax.fori_loop(0, STEPS, lambda i, s: step(s, x, y), (params, momentum))
        return step((params, momentum), x, y)

    params = {"w1": spec(1024, 4096), "w2": spec(4096, 1024)}
    return lambda: (run, (params, params, spec(256, 1024), spec(256, 1024)),
                    {"donate_argnums": (0, 1)})


SET = [
    Entry("stencil2d_at", stencil2d("at"), "within 1.5x of stencil2d_pad (cycles, busiest)"),
    Entry("stencil2d_dus", stencil2d("dus"), "within 1.5x of stencil2d_pad (cycles, busiest)"),
    Entry("stencil2d_pad", stencil2d("pad"), "reference of the two above"),
    Entry("heat3d_at_loop", heat3d("at"), "within 1.5x of heat3d_pad_loop (cycles, busiest)"),
    Entry("heat3d_pad_loop", heat3d("pad"), "reference of the one above"),
    Entry("reaction_diffusion_loop", reaction_diffusion(True),
          "busiest tile's data no larger than reaction_diffusion_step's (donated state)"),
    Entry("reaction_diffusion_step", reaction_diffusion(False), "reference of the one above"),
    Entry("qr_256", qr, "cycles <= 256 x a fused column (qr_column_256 per trip)"),
    Entry("qr_column_256", qr_column, "reference of the one above: per trip of its loop"),
    Entry("transformer_block", transformer_block,
          "no faster than its flops at the AMP peak; fits"),
    Entry("cnn_inference", cnn_inference, "no faster than its flops at the AMP peak; fits"),
    Entry("training_loop", training_step(True),
          "busiest tile's data no larger than training_step's (donated params and momentum)"),
    Entry("training_step", training_step(False), "reference of the one above"),
]


# --- judging -----------------------------------------------------------------------------------
def judge(entry: Entry) -> dict[str, Any]:
    fn, args, options = entry.build()
    lowered = jax.jit(fn, **options).trace(*args).lower(lowering_platforms=("ipu",))
    report = jax_ipu.report(lowered)
    figure = {"cycles": report.cycles.total, "us": report.seconds * 1e6,
              "busiest_tile_bytes": report.memory.max_tile_bytes,
              # the busiest tile's data: a loop adds its own control code (a counter, a
              # compare, a branch) to every tile, which no aliasing can save
              "busiest_data_bytes": report.memory.max_tile_bytes
              - report.memory.code_bytes_per_tile,
              "fits": not report.memory.out_of_memory, "flops": report.flops,
              "clock_hz": report.target.clock_hz}
    loops = [o for o in report.ops if o.kind == "while"]
    if entry.name.startswith("qr_column") and loops:
        trips = max(1, int(loops[0].note.split()[-1])) if "trip count" in loops[0].note else 1
        body = [o for o in report.ops if o.depth > 0]
        figure["per_trip_cycles"] = sum(o.cycles for o in body) / trips
    figure["peak_cycles"] = report.flops / (
        report.target.num_tiles * report.target.flops_per_tile_cycle("float32"))
    return figure


def invariants(f: dict[str, dict[str, Any]]) -> dict[str, bool]:
    """Each invariant of the set, whether the figures keep it."""
    def within(a: str, b: str) -> bool:
        return f[a]["cycles"] <= 1.5 * f[b]["cycles"] and f[b]["cycles"] <= 1.5 * f[a][
            "cycles"] and f[a]["busiest_tile_bytes"] <= 1.5 * f[b]["busiest_tile_bytes"] and \
            f[b]["busiest_tile_bytes"] <= 1.5 * f[a]["busiest_tile_bytes"]
    return {
        "stencil2d_at": within("stencil2d_at", "stencil2d_pad"),
        "stencil2d_dus": within("stencil2d_dus", "stencil2d_pad"),
        "heat3d_at_loop": within("heat3d_at_loop", "heat3d_pad_loop"),
        "reaction_diffusion_loop": f["reaction_diffusion_loop"]["busiest_data_bytes"] <=
        f["reaction_diffusion_step"]["busiest_data_bytes"],
        "qr_256": f["qr_256"]["cycles"] <= 256 * f["qr_column_256"]["per_trip_cycles"],
        "transformer_block": f["transformer_block"]["cycles"] >= f["transformer_block"][
            "peak_cycles"] and f["transformer_block"]["fits"],
        "cnn_inference": f["cnn_inference"]["cycles"] >= f["cnn_inference"]["peak_cycles"]
        and f["cnn_inference"]["fits"],
        "training_loop": f["training_loop"]["busiest_data_bytes"] <=
        f["training_step"]["busiest_data_bytes"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", type=Path, help="write the figures and invariants here")
    args = parser.parse_args()
    figures = {}
    for entry in SET:
        figures[entry.name] = judge(entry)
        print(f"judged {entry.name}", file=sys.stderr)
    kept = invariants(figures)
    print(f"{'program':26s} {'cycles':>12s} {'us':>10s} {'busiest tile':>14s} "
          f"{'its data':>10s} fits  invariant / source")
    for entry in SET:
        f = figures[entry.name]
        held = {True: "holds: ", False: "FAILS: "}.get(kept.get(entry.name), "")
        print(f"{entry.name:26s} {f['cycles']:12,.0f} {f['us']:10,.1f} "
              f"{f['busiest_tile_bytes']:14,d} {f['busiest_data_bytes']:10,d} "
              f"{'yes ' if f['fits'] else 'NO  '}  "
              f"{held}{entry.check}")
    if args.json:
        args.json.write_text(json.dumps({"figures": figures, "invariants": kept}, indent=1))


if __name__ == "__main__":
    main()
