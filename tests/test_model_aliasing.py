"""Tests of the model's buffer aliasing as XLA assigns it: donated state through while/scan/cond,
loop bodies reading their state through views, and the check against XLA:CPU's own assignment.

Figures are hand-computed: float32[16384] on 16 tiles of an ipu2 is 65536 B, 4096 B a tile."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jax_ipu.compiler.aliasing import check_loop_aliases, loop_aliased_parameters
from jax_ipu.compiler.program import read_program
from jax_ipu.model import analyze, get_target
from jax_ipu.model.code import CATEGORIES
from tests._lowering import portable_artifact
from tests._subprocess import run_python

N = 16 * 1024
GRID = N * 4  # bytes of one float32[16384]
ON_TILE = GRID // 16
X = jax.ShapeDtypeStruct((N,), jnp.float32)
TARGET = get_target("ipu2", 16)


def _memory(fn, *args, **jit_kwargs):
    return analyze(read_program(portable_artifact(fn, *args, **jit_kwargs)), TARGET).memory


def _contributors(memory) -> dict[str, tuple[int, int]]:
    return {c.name: (c.bytes_on_tile, c.total_bytes) for c in memory.top_contributors}


def _data(memory) -> int:
    """Bytes of values at the peak: all but code and vertex state."""
    return memory.peak_bytes - sum(memory.by_category.get(c, 0) for c in CATEGORIES)


def loop(x):
    return lax.fori_loop(0, 10, lambda i, x: x * 1.1 + 1, x)


def step(x):
    return x * 1.1 + 1


def test_donated_loop_state_is_the_donated_parameter():
    # XLA gives the loop's operand, body argument and result and the loop's result one buffer:
    # the donated x is the loop's state, updated in place (before: x, the loop's result and a
    # body result, three copies of 4096 B on a tile)
    donated = _memory(loop, X, donate_argnums=0)
    named = _contributors(donated)
    assert named["argument 0 (x), aliased with parameter 0 through the loop"] == (ON_TILE, GRID)
    assert not any(name.startswith("while result") for name in named)
    assert donated.by_category["donated inputs"] == GRID and "outputs" not in donated.by_category
    assert donated.by_category["workspace"] < 64  # the body's loop counter, no copy of x
    assert donated.loop_aliased_parameters == (0,)
    # a kept parameter is copied into the loop's state first, as XLA's copy insertion does
    kept = _contributors(_memory(loop, X))
    assert kept["argument 0 (x)"] == kept["while result"] == (ON_TILE, GRID)


def test_a_kept_input_the_loop_only_reads_is_not_copied():
    # fori_loop(..., lambda i, p: p * 1.01 + x, p): x is passed through the body unchanged.
    # XLA's copy insertion copies only the indices the body writes (x enters the while tuple
    # as the parameter itself): x is one buffer, 4096 B a tile, and no while result of its own
    # (before: a second 4096 B a tile for the loop's copy of x)
    def run(p, x):
        return lax.fori_loop(0, 5, lambda i, p: p * 1.01 + x, p)

    memory = _memory(run, X, X, donate_argnums=0)
    named = _contributors(memory)
    assert named["argument 1 (x)"] == (ON_TILE, GRID)
    assert named["argument 0 (p), aliased with parameter 0 through the loop"] == (ON_TILE, GRID)
    assert not any(name.startswith("while result") for name in named)
    assert memory.loop_aliased_parameters == (0,)  # as XLA:CPU's buffer assignment says
    assert _data(memory) <= 2 * GRID + 64  # p, x and the loop counter


@pytest.mark.parametrize("body", [
    step,
    lambda u: jnp.pad(u[2:] + u[:-2], 1),  # a stencil of shifted slices of the state
], ids=["elementwise", "shifted slices"])
def test_donated_loop_no_larger_than_its_step(body):
    looped = _memory(lambda u: lax.fori_loop(0, 4, lambda i, u: body(u), u), X, donate_argnums=0)
    alone = _memory(body, X, donate_argnums=0)
    assert _data(looped) <= _data(alone) + 64  # + the loop counter


def test_slices_of_loop_state_are_views_not_copies():
    # The body of u -> pad(u[2:] + u[:-2], 1) holds only the sum (16382 floats: 65528 B) on
    # top of what the plain body holds, and while the sum runs the 2 elements each of the
    # 15 tiles after the first receives from its neighbour (120 B; the plain body's peak
    # holds a scalar or two more); its two slices are views of the state (before: each a
    # copy, 131064 B of workspace)
    plain = _contributors(_memory(loop, X, donate_argnums=0))["while workspace"][1]
    shifted = _contributors(_memory(
        lambda u: lax.fori_loop(0, 4, lambda i, u: jnp.pad(u[2:] + u[:-2], 1), u), X,
        donate_argnums=0))["while workspace"][1]
    assert (N - 2) * 4 + 15 * 8 - 8 <= shifted - plain <= (N - 2) * 4 + 15 * 8


def test_nested_loops_share_the_state():
    # the inner loop's state is the outer loop's, which is the donated x: one copy
    def nested(x):
        return lax.fori_loop(0, 3, lambda i, x: lax.fori_loop(0, 4, lambda j, y: step(y), x), x)

    m = _memory(nested, X, donate_argnums=0)
    assert _contributors(m)["argument 0 (x), aliased with parameter 0 through the loop"] == \
        (ON_TILE, GRID)
    assert m.by_category["workspace"] < 64


def test_two_fields_carried_in_place():
    # (x, y) -> (x * 1.1 + 1, y + x): y + x runs first (it is y's last reader), then x's update
    # overwrites x; both donated buffers are the loop's state, no copy (before: six buffers)
    def two(x, y):
        return lax.fori_loop(0, 10, lambda i, c: (c[0] * 1.1 + 1, c[1] + c[0]), (x, y))

    m = _memory(two, X, X, donate_argnums=(0, 1))
    named = _contributors(m)
    for i, name in enumerate("xy"):
        assert named[f"argument {i} ({name}), aliased with parameter {i} through the loop"] == \
            (ON_TILE, GRID)
    assert m.by_category["workspace"] < 64
    assert m.loop_aliased_parameters == (0, 1)


def test_scan_carry_is_the_donated_parameter():
    def scan(u):
        return lax.scan(lambda c, _: (c * 2 + 1, None), u, None, length=5)[0]

    m = _memory(scan, X, donate_argnums=0)
    assert _contributors(m)["argument 0 (u), aliased with parameter 0 through the loop"] == \
        (ON_TILE, GRID)
    assert m.by_category["workspace"] < 64


def test_branch_results_are_the_conditionals_result():
    # a branch writes its result straight into the conditional's: x and the result, no third
    # buffer in the branch (before: 4104 B of case workspace on a tile)
    def cond(p, x):
        return lax.cond(p, lambda x: x * 2, lambda x: x + 1, x)

    m = _memory(cond, jax.ShapeDtypeStruct((), jnp.bool_), X, donate_argnums=1)
    named = _contributors(m)
    assert named["argument 1 (x)"] == named["case result"] == (ON_TILE, GRID)
    assert m.by_category.get("workspace", 0) < 64


def two_fields(x, y):
    return lax.fori_loop(0, 10, lambda i, c: (c[0] * 1.1 + 1, c[1] + c[0]), (x, y))


@pytest.mark.parametrize("donate", [(0, 1), (0,), ()])
def test_model_aliases_what_xla_cpu_aliases(donate):
    # XLA:CPU's buffer assignment of the same program names the same parameters
    on_cpu = jax.ShapeDtypeStruct((N,), jnp.float32,
                                  sharding=jax.sharding.SingleDeviceSharding(jax.devices("cpu")[0]))
    compiled = jax.jit(two_fields, donate_argnums=donate).lower(on_cpu, on_cpu).compile()
    executable = compiled.runtime_executable()
    xla = loop_aliased_parameters(
        executable.get_compiled_memory_stats().serialized_buffer_assignment_proto,
        executable.hlo_modules()[0].as_serialized_hlo_module_proto())
    assert xla == frozenset(donate)
    model = analyze(read_program(portable_artifact(two_fields, X, X, donate_argnums=donate)),
                    TARGET)
    assert model.memory.loop_aliased_parameters == tuple(donate)
    assert check_loop_aliases(model, xla) is model
    warned = check_loop_aliases(model, frozenset({0, 1, 2}))
    assert warned.warnings[-1].startswith(
        "XLA's buffer assignment aliases parameter(s) [0, 1, 2] through loops, the model ")


def test_compile_reports_the_loop_aliasing():
    # through the plugin: the report of a donated loop compiled for ipu names the aliasing and
    # has no warning (XLA:CPU's assignment agrees)
    code = """
    import json, jax, jax.numpy as jnp, jax_ipu
    from jax import lax
    f = jax.jit(lambda x: lax.fori_loop(0, 10, lambda i, x: x * 1.1 + 1, x), donate_argnums=0)
    x = jax.device_put(jnp.ones(16384, jnp.float32), jax.devices("ipu")[0])
    compiled = f.lower(x).compile()
    r = jax_ipu.report(compiled)
    y = compiled(x)
    print(json.dumps({"aliased": r.memory.loop_aliased_parameters, "warnings": r.warnings,
                      "names": [c.name for c in r.memory.top_contributors],
                      "sum": float(y.sum())}))
    """
    out = json.loads(run_python(code).stdout.strip().splitlines()[-1])
    assert out["aliased"] == [0] and out["warnings"] == []
    assert "argument 0 (x), aliased with parameter 0 through the loop" in out["names"]
    expected = np.ones(N, np.float32)
    for _ in range(10):
        expected = expected * np.float32(1.1) + np.float32(1)
    assert out["sum"] == pytest.approx(float(expected.sum()), rel=1e-6)


LOWER_STENCILS = """
import json, os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

mesh = Mesh(np.array(jax.devices()), ("i",))

def laplacian(u):
    c = u[1:-1, 1:-1, 1:-1]
    return (u[:-2, 1:-1, 1:-1] + u[2:, 1:-1, 1:-1] + u[1:-1, :-2, 1:-1] + u[1:-1, 2:, 1:-1]
            + u[1:-1, 1:-1, :-2] + u[1:-1, 1:-1, 2:]) - 6 * c

def plain(u):  # plain slices of the sharded grid
    return u.at[1:-1, 1:-1, 1:-1].set(u[1:-1, 1:-1, 1:-1] + 0.1 * laplacian(u))

def block(b):  # one block per IPU, its halo planes from its neighbours
    up = jax.lax.ppermute(b[-1:], "i", [(k, k + 1) for k in range(3)])
    down = jax.lax.ppermute(b[:1], "i", [(k + 1, k) for k in range(3)])
    e = jnp.concatenate([up, b, down])
    return jnp.pad(e[1:-1, 1:-1, 1:-1] + 0.1 * laplacian(e), ((0, 0), (1, 1), (1, 1)))

blocked = jax.shard_map(block, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
grid = jax.ShapeDtypeStruct((64, 64, 64), jnp.float32)
sharded = NamedSharding(mesh, P("i"))
texts = {name: jax.jit(lambda u, f=f: jax.lax.fori_loop(0, 5, lambda i, v: f(v), u),
                       in_shardings=sharded, out_shardings=sharded,
                       donate_argnums=0).lower(grid).as_text()
         for name, f in (("plain", plain), ("blocked", blocked))}
print(json.dumps(texts))
"""


def test_plain_stencil_of_a_sharded_grid_holds_what_the_blocked_one_does():
    # A 3-D stencil in a loop over a grid sharded on 4 IPUs: the plain form's shifted slices of
    # the loop state are views, not copies living to their last reader, so its busiest tile
    # holds about what the blocked (shard_map) form's does (before: 19060 B against 14228 B,
    # the plain body holding 29 shards' worth of slices on a tile)
    texts = json.loads(run_python(LOWER_STENCILS, env={"JAX_PLATFORMS": "cpu"}).stdout)
    plain, blocked = (analyze(read_program(texts[k]), get_target("ipu2")).memory
                      for k in ("plain", "blocked"))
    assert plain.max_tile_bytes <= 1.1 * blocked.max_tile_bytes
    assert plain.loop_aliased_parameters == blocked.loop_aliased_parameters == (0,)


def _laplacian(p):
    return (p[:-2, 1:-1] + p[2:, 1:-1]) + (p[1:-1, :-2] + p[1:-1, 2:]) - 4 * p[1:-1, 1:-1]


def gray_scott_step(u, v):
    uc, vc = u[1:-1, 1:-1], v[1:-1, 1:-1]
    uvv = uc * vc * vc
    un = uc + 0.16 * _laplacian(u) - uvv + 0.035 * (1 - uc)
    vn = vc + 0.08 * _laplacian(v) + uvv - 0.095 * vc
    return jnp.pad(un, 1), jnp.pad(vn, 1)


def test_two_field_reaction_diffusion_fits_as_its_step_does():
    # Gray-Scott on two float32[7000, 7000] fields (133 KB a tile each of an ipu2's 624 KiB,
    # 4.75 rows): the donated loop holds the two fields and the step's two new interiors, as
    # the step alone does (before: 1.6 MB on the busiest tile, out of memory), and while the
    # second expression runs, the row above and the row below each tile's rows of its field
    # (2 x 28 KB a tile, received from its neighbours)
    grid = jax.ShapeDtypeStruct((7000, 7000), jnp.float32)
    target = get_target("ipu2")

    def loop(u, v):
        return lax.fori_loop(0, 10, lambda i, c: gray_scott_step(*c), (u, v))

    looped, alone = (analyze(read_program(portable_artifact(f, grid, grid, donate_argnums=(0, 1))),
                             target).memory for f in (loop, gray_scott_step))
    assert not looped.out_of_memory and looped.loop_aliased_parameters == (0, 1)
    assert _data(looped) <= _data(alone) + 64
    field = 7000 * 7000 * 4
    halos = 1472 * 2 * 7000 * 4
    assert 2 * field + halos <= _contributors(looped)["while workspace"][1] < \
        2 * field + 1.02 * halos  # sampled


def _heat_interior(u):
    c = u[1:-1, 1:-1, 1:-1]
    return c + 0.1 * ((u[:-2, 1:-1, 1:-1] + u[2:, 1:-1, 1:-1] + u[1:-1, :-2, 1:-1]
                       + u[1:-1, 2:, 1:-1] + u[1:-1, 1:-1, :-2] + u[1:-1, 1:-1, 2:]) - 6 * c)


def test_3d_heat_loop_fits_in_both_forms():
    # float32[300, 300, 300] (73 KB a tile, a fifth of a plane): each step's slices of the
    # loop state are views, so the loop holds the grid and the new interior (before: 663644 B
    # on the busiest tile, 7 slices kept whole as copies, out of memory), and while the
    # expression runs, what each tile receives from other tiles: its elements' neighbours a
    # plane up and a plane down (two more tile shares, all elsewhere) and a row up and down
    # (300 elements each, partly elsewhere)
    grid = jax.ShapeDtypeStruct((300, 300, 300), jnp.float32)
    forms = {"at_set": lambda u: u.at[1:-1, 1:-1, 1:-1].set(_heat_interior(u)),
             "pad": lambda u: jnp.pad(_heat_interior(u), 1)}
    reports = {name: analyze(read_program(portable_artifact(
        lambda u, s=s: lax.fori_loop(0, 10, lambda i, v: s(v), u), grid, donate_argnums=0)),
        get_target("ipu2")) for name, s in forms.items()}
    memory = {name: r.memory for name, r in reports.items()}
    one_grid = _contributors(memory["pad"])["argument 0 (u), aliased with parameter 0 through "
                                            "the loop"][0]
    for m in memory.values():
        assert not m.out_of_memory and m.loop_aliased_parameters == (0,)
        assert 2.9 * one_grid <= _contributors(m)["while workspace"][0] <= \
            3 * one_grid + 2 * 300 * 4
    assert memory["at_set"].max_tile_bytes <= 1.5 * memory["pad"].max_tile_bytes
    # a static copy, not a scatter (before: a scatter, 21x the pad form at 160^3)
    assert reports["at_set"].cycles.total <= 1.5 * reports["pad"].cycles.total
