"""Custom C++ vertices: built for the host, cached by content, run per tile through XLA FFI on ipu
and cpu; compile errors, a missing compiler, and a vertex returning false are clear errors."""

from __future__ import annotations

import os
from pathlib import Path

import jax
import numpy as np
import pytest

import jax_ipu
from jax_ipu import sealing
from jax_ipu.errors import IpuTileTypeError, IpuVertexBuildError
from jax_ipu.tile import build, declare_vertex, tile_map, tile_put_sharded

TILES = (0, 3, 4)

SCALE = r"""
#include <poplar/HalfFloat.hpp>
#include <poplar/Vertex.hpp>
using namespace poplar;

// Templated on the element type: y = x * factor (+ InOut accumulate of y into acc).
template <typename T>
class Scale : public Vertex {
 public:
  Input<Vector<T, VectorLayout::SPAN>> x;
  InOut<Vector<T>> acc;
  Output<Vector<T, VectorLayout::ONE_PTR>> y;
  int factor;
  bool compute() {
    for (std::size_t i = 0; i < x.size(); ++i) {
      y[i] = x[i] * T(factor);
      acc[i] += y[i];
    }
    return true;
  }
};
"""

SPLIT = r"""
#include <poplar/Vertex.hpp>
using namespace poplar;

// Several outputs, a temporary, a constant, 2-D fields and a check: rows of x scaled by
// `scale` and by the constant's first value; the row sums; fails when a sum is negative and
// strict is set.
class Split : public Vertex {
 public:
  Vector<Input<Vector<float>>> x;      // (rows, cols) on the tile
  Input<Vector<float>> weight;         // constant, on every tile
  Output<VectorList<float>> scaled;    // (rows, cols)
  Output<Vector<float>> sums;          // (rows,)
  Output<Vector<float>> scratch;       // temporary (cols,)
  float scale;
  bool strict;
  bool compute() {
    bool ok = true;
    for (std::size_t r = 0; r < x.size(); ++r) {
      float total = 0;
      for (std::size_t c = 0; c < x[r].size(); ++c) {
        scratch[c] = x[r][c] * scale * weight[0];
        total += scratch[c];
      }
      for (std::size_t c = 0; c < x[r].size(); ++c) scaled[r][c] = scratch[c];
      sums[r] = total;
      if (strict && total < 0) ok = false;
    }
    return ok;
  }
};
"""


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    cache = tmp_path_factory.getbasetemp() / "vertex-cache"
    monkeypatch.setattr(build, "cache_dir", lambda: cache)
    return cache


@declare_vertex("Scale<{x}>", source=SCALE)
def scale(x, acc):
    return {"y": x, "acc": acc}, {}, {}, lambda x, acc: 4 * x.shape[0]


@declare_vertex("Split", source=SPLIT)
def split(x):
    rows, cols = x.shape
    return ({"scaled": x, "sums": jax.ShapeDtypeStruct((rows,), x.dtype)},
            {"weight": np.array([0.5], np.float32)},
            {"scratch": jax.ShapeDtypeStruct((cols,), x.dtype)}, 100 + 3 * x.size)


def run(platform, fn, *args):
    device = jax.devices(platform)[0]
    return jax.tree.map(np.asarray, jax.jit(fn)(*(jax.device_put(a, device) for a in args)))


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float16])
@pytest.mark.parametrize("platform", ["ipu", "cpu"])
def test_templated_vertex_with_inout(dtype, platform):
    x = (np.arange(15).reshape(3, 5) - 4).astype(dtype)
    acc = np.ones((3, 5), dtype)

    def f(x, acc):
        return tile_map(scale, tile_put_sharded(x, TILES), tile_put_sharded(acc, TILES), factor=3)

    acc_out, y = run(platform, f, x, acc)
    np.testing.assert_array_equal(y.array, x * dtype(3))
    np.testing.assert_array_equal(acc_out.array, acc + x * dtype(3))
    assert y.dtype == dtype


@pytest.mark.parametrize("platform", ["ipu", "cpu"])
def test_multiple_outputs_temporary_constant_2d(platform):
    x = np.arange(24, dtype=np.float32).reshape(3, 2, 4)

    def f(x):
        return tile_map(split, tile_put_sharded(x, TILES), scale=2.0, strict=False)

    scaled, sums = run(platform, f, x)
    np.testing.assert_array_equal(scaled.array, x * np.float32(2.0) * np.float32(0.5))
    np.testing.assert_array_equal(sums.array, (x * np.float32(1.0)).sum(axis=2))


def test_optional_jax_implementation_serves_cpu():
    @declare_vertex("Scale<{x}>", source=SCALE)
    def scale_with_impl(x, acc):
        return {"y": x, "acc": acc}, {}, {}, 1

    calls = []

    def impl(x, acc, factor):
        calls.append(1)
        return acc + 10 * x, x * 10  # not the codelet: shows which one ran

    scale_with_impl.def_impl(impl)
    x = np.ones((3, 2), np.float32)

    def f(x):
        a = tile_put_sharded(x, TILES)
        return tile_map(scale_with_impl, a, a, factor=2)

    _, y_cpu = run("cpu", f, x)
    _, y_ipu = run("ipu", f, x)
    np.testing.assert_array_equal(y_cpu.array, 10 * x)  # the JAX implementation
    np.testing.assert_array_equal(y_ipu.array, 2 * x)  # the codelet
    assert calls


def test_vertex_returning_false_fails_the_call_naming_vertex_and_tile():
    x = np.ones((3, 1, 4), np.float32)
    x[1] = -1

    def f(x):
        return tile_map(split, tile_put_sharded(x, TILES), scale=1.0, strict=True)

    for platform in ("ipu", "cpu"):
        with pytest.raises(Exception, match=r"vertex Split returned false on tile 3 \(.*"
                           r"test_tile_vertex.py:\d+ \(f\)\)") as err:
            jax.block_until_ready(jax.jit(f)(jax.device_put(x, jax.devices(platform)[0])))
        assert "vertex assertion" in str(err.value)
        assert "internal error" not in str(err.value)


def test_builds_are_cached_by_content(_cache):
    x = np.ones((3, 4), np.float32)
    run("ipu", lambda x: tile_map(scale, tile_put_sharded(x, TILES), tile_put_sharded(x, TILES),
                                  factor=1), x)
    libs = sorted(_cache.glob("*/vertex.so"))
    assert libs and all(sealing.named_seal_holds(p, p.parent / build.SEAL, p.parent.name)
                        for p in libs)
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in libs)
    # Another attribute value is the same build: nothing new is compiled.
    run("ipu", lambda x: tile_map(scale, tile_put_sharded(x, TILES), tile_put_sharded(x, TILES),
                                  factor=5), x)
    assert sorted(_cache.glob("*/vertex.so")) == libs


def test_a_tampered_library_is_rebuilt_not_loaded(_cache):
    b = build.Build("class Nothing {};", "<test>", "")
    lib = build.library(b)
    lib.write_bytes(b"not what the build wrote")
    assert build.library(b).read_bytes() != b"not what the build wrote"


def test_compile_error_shows_the_compilers_file_and_line(tmp_path):
    codelet = tmp_path / "broken.cpp"
    codelet.write_text("#include <poplar/Vertex.hpp>\nclass Broken : public poplar::Vertex {\n"
                       " public:\n  bool compute() { return undefined_name; }\n};\n")

    @declare_vertex("Broken", file=codelet)
    def broken(x):
        return {"y": x}, {}, {}, 1

    with pytest.raises(IpuVertexBuildError) as err:
        jax.jit(lambda x: tile_map(broken, tile_put_sharded(x, TILES)))(np.ones((3, 2)))
    message = str(err.value)
    assert f"{codelet}:4" in message and "undefined_name" in message


def test_field_of_another_dtype_is_a_compile_error():
    @declare_vertex("Scale<float>", source=SCALE)
    def wrong(x, acc):
        return {"y": x, "acc": acc}, {}, {}, 1

    x = np.ones((3, 2), np.int32)
    with pytest.raises(IpuVertexBuildError, match="element type differs from the dtype"):
        jax.jit(lambda x: tile_map(wrong, tile_put_sharded(x, TILES),
                                   tile_put_sharded(x, TILES), factor=1))(x)


def test_missing_compiler_is_one_clear_error(monkeypatch):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(IpuVertexBuildError, match="no C\\+\\+ compiler found.*install g\\+\\+ "
                       "\\(Debian/Ubuntu: apt-get install g\\+\\+"):
        build.compiler()
    monkeypatch.setenv("CXX", "no-such-c++")
    with pytest.raises(IpuVertexBuildError, match="CXX='no-such-c\\+\\+' names a C\\+\\+ "
                       "compiler that is not on PATH"):
        jax.jit(lambda x: tile_map(split, tile_put_sharded(x, TILES), scale=1.0,
                                   strict=False))(np.ones((3, 2, 2), np.float32))


def test_declaration_errors():
    with pytest.raises(IpuTileTypeError, match="source= .* or file="):
        declare_vertex("X")(lambda x: None)

    @declare_vertex("Scale<{y}>", source=SCALE)
    def bad_placeholder(x, acc):
        return {"y": x}, {}, {}, 1

    @declare_vertex("Scale<{x}>", source=SCALE)
    def bad_estimate(x, acc):
        return {"y": x, "acc": acc}, {}, {}, -5

    a = tile_put_sharded(np.ones((3, 2), np.float32), TILES)
    with pytest.raises(Exception, match="placeholder \\{y\\} names no input"):
        tile_map(bad_placeholder, a, a)
    with pytest.raises(IpuTileTypeError, match="estimate must be a number >= 0"):
        tile_map(bad_estimate, a, a, factor=1)
    with pytest.raises(IpuTileTypeError, match="takes 2 input"):
        tile_map(scale, a)
    with pytest.raises(IpuTileTypeError, match="must be a scalar"):
        tile_map(scale, a, a, factor="3")


def test_only_registered_targets_are_allowed_on_ipu():
    from jax_ipu.compiler import checks

    x = np.ones((3, 4), np.float32)
    compiled = jax.jit(lambda x: tile_map(scale, tile_put_sharded(x, TILES),
                                          tile_put_sharded(x, TILES), factor=1)).lower(
        jax.device_put(x, jax.devices("ipu")[0])).compile()
    row = next(o for o in jax_ipu.report(compiled).ops if o.kind == "tile_vertex")
    assert row.compute_cycles == 16  # the declared 4 * 4 cycles per tile
    registered = [t for t in checks.ALLOWED_CUSTOM_CALLS if t.startswith("jax_ipu_vertex_")]
    assert registered
    with pytest.raises(Exception, match="custom_call @not_a_vertex.*no IPU implementation"):
        jax.jit(lambda x: jax.ffi.ffi_call("not_a_vertex", jax.ShapeDtypeStruct((4,),
                                                                                np.float32))(x))(
            jax.device_put(np.ones(4, np.float32), jax.devices("ipu")[0]))


def test_header_is_shipped_with_the_package():
    include = Path(build.INCLUDE_DIR)
    assert (include / "poplar" / "Vertex.hpp").is_file()
    assert (include / "poplar" / "HalfFloat.hpp").is_file()
    assert os.access(build.NATIVE_DIR / "cycle_count.cc", os.R_OK)
