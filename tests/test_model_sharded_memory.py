"""Memory of multi-device programs is per device: entry values and shard_map operands and
results count as the shard one IPU holds, not the global array JAX's types describe.

Programs are lowered by JAX on CPU in a child process with 4 devices (set before jax starts)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import pytest

from jax_ipu.compiler.program import read_program
from jax_ipu.model import analyze, get_target
from jax_ipu.model.code import CATEGORIES
from jax_ipu.model.ir import TensorType
from tests._lowering import portable_artifact
from tests._subprocess import run_python

PER_DEVICE = 1000  # float32 elements of the input each device holds
LOWER_SHARDED = f"""
import json, os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

def f(v):
    return jax.lax.psum(v * 2, "i")

texts = {{}}
for n in (1, 2, 4):
    devices = jax.devices()[:n]
    mesh = Mesh(np.array(devices), ("i",))
    flat = jax.ShapeDtypeStruct((n * {PER_DEVICE},), jnp.float32)
    sharded = NamedSharding(mesh, P("i"))
    lowered = {{
        "pmap": jax.pmap(f, axis_name="i", devices=devices).lower(
            jax.ShapeDtypeStruct((n, {PER_DEVICE}), jnp.float32)),
        "shard_map": jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("i"),
                                           out_specs=P("i"))).lower(flat),
        "jit": jax.jit(jnp.sin, in_shardings=sharded, out_shardings=sharded).lower(flat),
    }}
    for kind, low in lowered.items():
        texts[f"{{kind}} {{n}}"] = low.as_text()
print(json.dumps(texts))
"""


@pytest.fixture(scope="module")
def sharded_texts() -> dict[str, str]:
    return json.loads(run_python(LOWER_SHARDED, env={"JAX_PLATFORMS": "cpu"}).stdout)


@pytest.mark.parametrize("kind", ["pmap", "shard_map", "jit"])
@pytest.mark.parametrize("n", [1, 2, 4])
def test_arguments_and_results_count_one_devices_shard(sharded_texts, kind, n):
    r = analyze(read_program(sharded_texts[f"{kind} {n}"]), get_target("ipu2"))
    # 1000 float32 per device, whatever the device count (before: 4000 * n)
    assert r.memory.argument_bytes == PER_DEVICE * 4
    assert r.memory.output_bytes == PER_DEVICE * 4
    assert r.target.num_ipus == n and not r.warnings


def test_peak_per_device_does_not_grow_with_devices(sharded_texts):
    def peak(n: int) -> int:
        """The data at the peak: code follows the ops' judged tiles, which for a program
        before partitioning are those of its global shapes."""
        memory = analyze(read_program(sharded_texts[f"jit {n}"]), get_target("ipu2")).memory
        return memory.peak_bytes - sum(memory.by_category.get(c, 0) for c in CATEGORIES)

    assert peak(1) == peak(2) == peak(4)


def test_one_device_program_unchanged():
    program = read_program(portable_artifact(lambda v: v * 2,
                                             jax.ShapeDtypeStruct((PER_DEVICE,), jnp.float32)))
    assert program.shards == {}
    assert analyze(program, get_target("ipu2")).memory.argument_bytes == PER_DEVICE * 4


SHARDINGS = """
module @jit_f attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["i"=4, "j"=2]>
  func.func public @main(
      %a: tensor<10x6xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"i", "j"}, {}]>},
      %b: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"i":(1)2}], replicated={"j"}>},
      %c: tensor<8xf32> {sdy.sharding = #sdy.sharding<mesh<["k"=2]>, [{"k"}]>},
      %d: tensor<8xf32> {mhlo.sharding = "{devices=[8]<=[8]}"},
      %e: tensor<8xf32>) -> (tensor<10x6xf32>) {
    return %a : tensor<10x6xf32>
  }
}
"""


def test_sharding_forms_and_unreadable_ones_warn():
    program = read_program(SHARDINGS)
    a, b, c, _, _ = program.input_ids
    # 10 rows over 4 x 2 devices: the largest shard has 2 rows; a sub-axis of size 2 halves b,
    # an inline mesh of 2 halves c
    assert program.shards == {a: (8, 1), b: (2,), c: (2,)}
    assert program.inputs[0].shard(program.shards[a]) == TensorType((2, 6), "float32")
    r = analyze(program, get_target("ipu2"))
    assert r.memory.argument_bytes == 2 * 6 * 4 + 4 * 4 + 4 * 4 + 8 * 4 + 8 * 4
    assert r.memory.output_bytes == 2 * 6 * 4
    # d (a GSPMD sharding, not read) and e (no sharding) count whole: memory may be overstated
    assert any(w.startswith("2 value(s) outside shard_map bodies") and "overstated" in w
               for w in r.warnings)
