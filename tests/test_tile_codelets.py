"""Codelets in popc's dialect built as Poplar builds them (clang++ first, g++ where it is absent):
__builtin_assume, always_inline under -fPIC, constructors never defined, const fields; MultiVertex
workers that wait on each other, run at once; a worker that never finishes is a clear error;
declarations that read the call's parameters and attributes that are arrays."""

from __future__ import annotations

import os
import shutil
import stat

import jax
import numpy as np
import pytest

from jax_ipu.errors import IpuTileTypeError
from jax_ipu.tile import build, custom, declare_vertex, tile_map, tile_put_sharded

# Written in the dialect TessellateIPU's codelets use on popc: an always_inline function that is
# neither static nor inline, __builtin_assume, constructors declared and never defined, a const
# attribute field, workers that hand results to each other through static memory.
SOURCE = r"""
#include <poplar/Vertex.hpp>
using namespace poplar;

__attribute__((always_inline)) float square(float v) { return v * v; }

struct Handover {
  volatile float value[6];
  volatile unsigned ready[6];
  volatile float total;
  volatile unsigned total_ready;
};

// Sum of squares of x[skip:]: each worker a strided share, gathered by worker 0, whose total
// worker 5 then waits for (workers waiting on each other both ways).
class SquareSum : public MultiVertex {
 public:
  Input<Vector<float>> x;
  Output<Vector<float>> out;  // (2,): the total, and the total as worker 5 received it
  const unsigned skip;
  static Handover handover;
  SquareSum();

  bool compute(unsigned wid) {
    __builtin_assume(wid < 6);
    float s = 0;
    for (unsigned i = wid; i < x.size(); i += 6) {
      if (i >= skip) s += square(x[i]);
    }
    if (wid != 0) {
      handover.value[wid] = s;
      handover.ready[wid] = 1;
      if (wid == 5) {
        while (handover.total_ready == 0) {
        }
        out[1] = handover.total;
        handover.total_ready = 0;
      }
      return true;
    }
    for (unsigned w = 1; w < 6; ++w) {
      while (handover.ready[w] == 0) {
      }
      s += handover.value[w];
      handover.ready[w] = 0;
    }
    out[0] = s;
    handover.total = s;
    handover.total_ready = 1;
    return true;
  }
};
Handover SquareSum::handover;

// Worker 3 waits for a flag no worker raises.
class Stuck : public MultiVertex {
 public:
  Input<Vector<float>> x;
  Output<Vector<float>> out;
  static volatile unsigned never;
  Stuck();
  bool compute(unsigned wid) {
    if (wid == 3) {
      while (never == 0) {
      }
    }
    out[wid % out.size()] = x[0];
    return true;
  }
};
volatile unsigned Stuck::never = 0;

// out[i] = (base + i * step) * scales[0][i] * scales[1][i] + offsets[i % offsets.size()]: its
// size and type from the call's parameters, base a constant of that type, offsets an array
// attribute, step a scalar one.
template <typename T>
class Ramp : public Vertex {
 public:
  Vector<Input<Vector<T>>, VectorLayout::ONE_PTR> scales;
  Input<T> base;
  Vector<int> offsets;
  Output<Vector<T, VectorLayout::SPAN>> out;
  T step;
  Ramp();

  bool compute() {
    for (unsigned i = 0; i < out.size(); ++i) {
      out[i] = (*base + T(i) * step) * scales[0][i] * scales[1][i] +
               T(offsets[i % offsets.size()]);
    }
    return true;
  }
};
"""

TILES = (2, 7, 7, 9)  # tile 7 holds two rows


@declare_vertex("SquareSum", source=SOURCE)
def square_sum(x):
    return {"out": jax.ShapeDtypeStruct((2,), np.float32)}, {}, {}, 100


@declare_vertex("Stuck", source=SOURCE)
def stuck(x):
    return {"out": x}, {}, {}, 100


@declare_vertex("Ramp<{dtype}>", source=SOURCE)
def ramp(scales, *, size, dtype):
    assert scales.shape == (2, size)
    return ({"out": jax.ShapeDtypeStruct((size,), dtype)}, {"base": np.array(7, dtype)}, {},
            lambda scales: 10 + size)


@pytest.fixture(scope="module", autouse=True)
def _built(tmp_path_factory):
    """Every vertex of SOURCE built once, as one library, in this session's cache."""
    cache = tmp_path_factory.getbasetemp() / "vertex-cache"
    saved = build.cache_dir
    build.cache_dir = lambda: cache
    row = jax.ShapeDtypeStruct((6,), np.float32)
    samples = [(square_sum, [row], {"skip": 0}), (stuck, [row], {}),
               (ramp, [jax.ShapeDtypeStruct((2, 5), np.float32)],
                {"size": 5, "dtype": np.float32, "offsets": (1, 2), "step": 0.5}),
               (ramp, [jax.ShapeDtypeStruct((2, 5), np.int32)],
                {"size": 5, "dtype": np.int32, "offsets": (1, 2), "step": 2})]
    calls = [custom.declared_call(v, avals, params) for v, avals, params in samples]
    custom.prebuild(calls, [avals for _, avals, _ in samples])
    yield
    build.cache_dir = saved


def run(platform, fn, *args):
    device = jax.devices(platform)[0]
    return jax.tree.map(np.asarray, jax.jit(fn)(*(jax.device_put(a, device) for a in args)))


def square_sums(x, skip):
    return tile_map(square_sum, tile_put_sharded(x, TILES), skip=skip)


@pytest.mark.parametrize("platform", ["ipu", "cpu"])
def test_workers_that_wait_on_each_other_see_each_others_results(platform):
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    for skip in (0, 13):
        out = run(platform, lambda x, skip=skip: square_sums(x, skip), x).array
        expected = (x[:, skip:].astype(np.float64) ** 2).sum(axis=1)
        np.testing.assert_allclose(out[:, 0], expected, rtol=1e-5)
        np.testing.assert_array_equal(out[:, 1], out[:, 0])  # worker 5 got worker 0's total


def test_the_same_codelet_builds_with_g_plus_plus(monkeypatch):
    """g++ (no __builtin_assume, always_inline refused under -fPIC without the flags) builds
    the same codelet, to the same results."""
    gxx = shutil.which("g++")
    assert gxx, "tools/install_test_deps.sh installs g++"
    monkeypatch.setenv("CXX", gxx)
    assert "-D__builtin_assume(condition)=((void)0)" in build.compiler_flags([gxx])
    assert "-fno-semantic-interposition" in build.compiler_flags([gxx])

    @declare_vertex("SquareSum", source=SOURCE)
    def with_gxx(x):
        return {"out": jax.ShapeDtypeStruct((2,), np.float32)}, {}, {}, 100

    x = np.arange(256, dtype=np.float32).reshape(4, 64) / 64
    out = run("cpu", lambda x: tile_map(with_gxx, tile_put_sharded(x, TILES), skip=3), x).array
    np.testing.assert_allclose(out[:, 0], (x[:, 3:] ** 2).sum(axis=1), rtol=1e-5)


def test_clang_is_preferred_newest_version_first(tmp_path, monkeypatch):
    monkeypatch.delenv("CXX", raising=False)
    gxx = shutil.which("g++")
    for name in ("clang++-15", "clang++-9", "g++"):
        path = tmp_path / name
        path.write_text(f"#!/bin/sh\nexec {gxx} \"$@\"\n")
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert build.compiler() == ["clang++-15"]
    for name in ("clang++-15", "clang++-9"):
        os.remove(tmp_path / name)
    assert build.compiler() == ["g++"]


def test_a_worker_that_never_finishes_is_stopped_with_a_clear_error():
    jax.config.update("jax_ipu_tile_worker_timeout_s", 0.5)
    try:
        x = np.ones((4, 6), np.float32)
        with pytest.raises(Exception, match=r"vertex Stuck on tile 2: worker\(s\) 3 of its "
                           r"workers did not finish within 500 ms \(jax_ipu_tile_worker_timeout_s"
                           r"\) and were stopped.*test_tile_codelets.py:\d+"):
            jax.block_until_ready(jax.jit(lambda x: tile_map(stuck, tile_put_sharded(x, TILES)))(
                x))
    finally:
        jax.config.update("jax_ipu_tile_worker_timeout_s", 60.0)
    # The worker threads are whole again.
    x = np.full((4, 12), 2, np.float32)
    np.testing.assert_allclose(run("ipu", lambda x: square_sums(x, 0), x).array[:, 0], 48)


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("platform", ["ipu", "cpu"])
def test_declaration_reads_the_calls_parameters_and_arrays_are_attributes(dtype, platform):
    scales = np.stack([np.arange(1, 6), np.full(5, 2)]).astype(dtype)
    scales = np.stack([scales, 3 * scales, scales, scales])

    def f(s):
        return tile_map(ramp, tile_put_sharded(s, TILES), size=5, dtype=dtype, offsets=(1, 2),
                        step=dtype(2))

    out = run(platform, f, scales).array
    i = np.arange(5)
    expected = (7 + i * 2) * scales[:, 0] * scales[:, 1] + np.array([1, 2])[i % 2]
    np.testing.assert_array_equal(out, expected.astype(dtype))
    assert out.dtype == dtype


def test_declaration_parameter_errors():
    s = tile_put_sharded(np.ones((4, 2, 5), np.float32), TILES)
    with pytest.raises(IpuTileTypeError, match="rejected the call .*declaration parameters: "
                       "size, dtype"):
        tile_map(ramp, s, size=5)
    with pytest.raises(IpuTileTypeError, match="attribute offsets=.* must hold numbers"):
        tile_map(ramp, s, size=5, dtype=np.float32, offsets=("a",), step=1.0)
