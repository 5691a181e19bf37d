"""jax_ipu.tessellate: TessellateIPU's public names resolve, under its module paths, onto
jax_ipu.tile; its primitive API runs C++ vertices described by IpuTileMapEquation; its semantics
are kept where jax_ipu.tile's differ (select_n, tile_map(None))."""

from __future__ import annotations

import importlib
import textwrap

import jax
import numpy as np
import pytest
from jax import lax
from jax.core import ShapedArray

import jax_ipu.tessellate as tessellate_ipu
from jax_ipu import tile
from jax_ipu.errors import IpuTileTypeError
from jax_ipu.tessellate.core import (
    IpuTileMapEquation,
    create_ipu_tile_primitive,
    declare_ipu_tile_primitive,
    from_numpy_dtype_to_ipu_type,
    make_ipu_vector1d_worker_offsets,
    make_ipu_vertex_constant_info,
    make_ipu_vertex_in_info,
    make_ipu_vertex_out_info,
    register_ipu_tile_primitive,
)
from jax_ipu.tile import build

# TessellateIPU's public API (its packages' __init__ and the modules its users import from),
# by module: every name resolves here.
API = {
    "": ["TileShardedArray", "create_ipu_tile_primitive", "declare_ipu_tile_primitive",
         "ipu_cycle_count", "tile_constant_replicated", "tile_constant_sharded",
         "tile_data_barrier", "tile_gather", "tile_map", "tile_put_replicated",
         "tile_put_sharded", "IpuDevice", "IpuTargetType", "is_ipu_model", "lax", "__version__"],
    "core": ["TileShardedArray", "tile_barrier", "tile_constant_replicated",
             "tile_constant_sharded", "tile_data_barrier", "tile_gather", "tile_put_replicated",
             "tile_put_sharded", "from_ipu_type_to_numpy_dtype", "make_ipu_shaped_array",
             "create_ipu_tile_primitive", "create_ipu_tile_primitive_v2",
             "declare_ipu_tile_primitive", "get_ipu_tile_primitive_translation",
             "register_ipu_tile_primitive", "tile_map", "hw_cycle_count_p", "ipu_cycle_count",
             "ipu_cycle_count_overhead", "ipu_hw_cycle_count", "IpuTileMapEquation",
             "IpuVertexIOType", "from_numpy_dtype_to_ipu_type", "get_ipu_type_name",
             "make_ipu_vertex_attributes", "make_ipu_vertex_constant_info",
             "make_ipu_vertex_in_info", "make_ipu_vertex_inout_info", "make_ipu_vertex_inputs",
             "make_ipu_vertex_io_info", "make_ipu_vertex_name_templated",
             "make_ipu_vertex_out_info", "make_ipu_vertex_outputs", "primitive_clone",
             "primitive_num_inout_alias_args", "make_ipu_vector1d_worker_offsets",
             "make_ipu_vector1d_worker_offsets_and_sizes"],
    "core.tile_interpreter_primitives": ["IpuTileMapEquation", "IpuVertexIOInfo",
                                         "tile_map_remove_ipu_attributes"],
    "core.tile_interpreter_vertex_utils": ["make_num_elements_per_worker"],
    "core.tile_common_utils": ["IpuType", "IpuShapedArray"],
    "lax": ["abs_p", "asin_p", "cbrt_p", "ceil_p", "erf_p", "exp_p", "expm1_p", "floor_p",
            "is_finite_p", "log1p_p", "log_p", "neg_p", "population_count_p", "round_p",
            "rsqrt_p", "select_n_p", "sign_p", "sin_p", "sqrt_p", "tan_p", "tanh_p",
            "tile_lax_binary", "tile_lax_dot", "tile_lax_reduce", "tile_lax_unary",
            "tile_random", "bitcast_convert_type_p", "fill", "fill_p", "reshape_p", "tile_fill",
            "tile_sharded_identity", "add_inplace_p", "atan2_inplace_p", "div_inplace_p",
            "max_inplace_p", "min_inplace_p", "mul_inplace_p", "pow_inplace_p",
            "rem_inplace_p", "scaled_add_p", "scaled_sub_p", "sub_inplace_p", "cummax_p",
            "cummin_p", "cumprod_p", "cumsum_p", "IpuConvVertexType", "gather_p",
            "scatter_add_p", "scatter_max_p", "scatter_min_p", "scatter_mul_p", "scatter_p",
            "rotation2d_p", "abs_inplace_p", "asin_inplace_p", "cbrt_inplace_p",
            "ceil_inplace_p", "erf_inplace_p", "exp_inplace_p", "expm1_inplace_p",
            "floor_inplace_p", "is_finite_inplace_p", "log1p_inplace_p", "log_inplace_p",
            "neg_inplace_p", "population_count_inplace_p", "round_inplace_p",
            "rsqrt_inplace_p", "sign_inplace_p", "sin_inplace_p", "sqrt_inplace_p",
            "tan_inplace_p", "tile_copy", "tile_get_hw_seeds", "tile_random_normal",
            "tile_random_uniform", "tile_set_hw_seeds"],
    "lax.tile_lax_binary": ["scaled_add_p", "scaled_sub_p", "scaled_add", "scaled_sub"],
    "lax.tile_random": ["ipu_random_uniform_p", "ipu_random_normal_p", "ipu_get_hw_seeds_p",
                        "ipu_set_hw_seeds_p"],
    "linalg": ["ipu_eigh", "ipu_hessenberg", "ipu_qr", "tile_linalg_jacobi", "tile_linalg_qr"],
    "linalg.tile_linalg_qr": ["ipu_qr", "ipu_qr_iterations", "ipu_qr_shard_inputs",
                              "dot_product1d_p", "qr_correction_vector_p",
                              "qr_householder_row_update_p", "make_ipu_vector1d_worker_offsets"],
    "linalg.tile_linalg_jacobi": ["ipu_eigh", "ipu_jacobi_eigh", "jacobi_sym_schur2_p",
                                  "jacobi_update_first_step_p", "jacobi_update_second_step_p",
                                  "jacobi_update_eigenvectors_p", "jacobi_initial_rotation_set",
                                  "jacobi_next_rotation_set", "jacobi_sort_rotation_set",
                                  "tile_rotate_columns", "tile_sharded_pq_columns",
                                  "INDEX_PREFIX"],
    "linalg.tile_linalg_hessenberg": ["ipu_hessenberg", "ipu_hessenberg_iterations",
                                      "hessenberg_correction_vector_p",
                                      "hessenberg_householder_row_update_p"],
    "utils": ["IpuDevice", "IpuTargetType", "is_ipu_model", "env_cpath_append",
              "env_path_append", "ArrayLike", "DType", "DTypeLike", "NDArray", "Shape"],
}

TILES = (0, 3, 4)

CODELETS = textwrap.dedent(r"""
    #include <poplar/Vertex.hpp>
    using namespace poplar;

    // x *= scale * w[0] in place over each worker's pairs; the new sum in total, each worker's
    // part in the temporary, added up by worker 0 once the others have raised their flags.
    template <typename T>
    class ScaleRows : public MultiVertex {
     public:
      InOut<Vector<T>> x;
      Input<Vector<T>> w;
      Input<Vector<unsigned short>> worker_offsets;
      Output<Vector<T>> total;
      Output<Vector<T>> tmp;
      float scale;
      static unsigned ready[6];
      ScaleRows();

      bool compute(unsigned wid) {
        T part = 0;
        for (unsigned i = 2 * worker_offsets[wid]; i < 2 * worker_offsets[wid + 1]; ++i) {
          x[i] = x[i] * T(scale) * w[0];
          part += x[i];
        }
        tmp[wid] = part;
        if (wid != 0) {
          __atomic_store_n(&ready[wid], 1u, __ATOMIC_RELEASE);
          return true;
        }
        for (unsigned k = 1; k < 6; ++k) {
          while (__atomic_load_n(&ready[k], __ATOMIC_ACQUIRE) == 0) {
          }
          ready[k] = 0;
          part += tmp[k];
        }
        total[0] = part;
        return true;
      }
    };
    template <typename T> unsigned ScaleRows<T>::ready[6];

    // out[i] = i * scales[0][i] * scales[1][i] * global_scale (TessellateIPU's custom arange).
    template <typename T>
    class Arange : public Vertex {
     public:
      Vector<Input<Vector<T>>, VectorLayout::ONE_PTR> scales;
      Input<T> global_scale;
      Output<Vector<T, VectorLayout::SPAN>> out;
      bool compute() {
        for (unsigned i = 0; i < out.size(); ++i) {
          out[i] = T(i) * scales[0][i] * scales[1][i] * (*global_scale);
        }
        return true;
      }
    };
""")


@pytest.fixture(scope="module")
def codelets(tmp_path_factory):
    saved = build.cache_dir
    build.cache_dir = lambda: tmp_path_factory.getbasetemp() / "vertex-cache"
    path = tmp_path_factory.mktemp("codelets") / "vertices.cpp"
    path.write_text(CODELETS)
    yield str(path)
    build.cache_dir = saved


def run(platform, fn, *args):
    device = jax.devices(platform)[0]
    return jax.tree.map(np.asarray, jax.jit(fn)(*(jax.device_put(a, device) for a in args)))


def test_every_public_name_resolves_under_its_module():
    for module, names in API.items():
        where = importlib.import_module("jax_ipu.tessellate" + (f".{module}" if module else ""))
        missing = [n for n in names if not hasattr(where, n)]
        assert not missing, (module, missing)


def test_names_are_jax_ipu_tiles_own():
    from jax_ipu.tessellate.lax.tile_lax_binary import scaled_add_p
    from jax_ipu.tessellate.linalg.tile_linalg_qr import ipu_qr

    assert scaled_add_p is tile.scaled_add_p
    assert ipu_qr is tile.linalg.ipu_qr
    assert tessellate_ipu.TileShardedArray is tile.TileShardedArray
    assert tessellate_ipu.lax.tile_copy is tile.tile_copy


@pytest.mark.parametrize("platform", ["ipu", "cpu"])
def test_select_n_picks_as_popops_select(platform):
    c = np.array([[True, False], [False, True], [True, True]])
    x, y = np.ones((3, 2), np.float32), np.zeros((3, 2), np.float32)

    def both(c, x, y):
        args = [tile.tile_put_sharded(v, TILES) for v in (c, x, y)]
        return tessellate_ipu.tile_map(lax.select_n_p, *args), tile.tile_map(lax.select_n_p,
                                                                               *args)

    popops, lax_order = run(platform, both, c, x, y)
    np.testing.assert_array_equal(popops.array, np.where(c, x, y))
    np.testing.assert_array_equal(lax_order.array, np.where(c, y, x))


def test_tile_map_of_none_and_ipu_options():
    a = tessellate_ipu.tile_put_sharded(np.ones((3, 8, 8), np.float32), TILES)
    assert tessellate_ipu.tile_map(None, a) == (a,)
    from jax_ipu.tessellate.lax import IpuConvVertexType

    out = run("ipu", lambda x: tessellate_ipu.tile_map(
        lax.dot_general_p, tessellate_ipu.tile_put_sharded(x, TILES),
        tessellate_ipu.tile_put_sharded(x, TILES), dimension_numbers=(([1], [1]), ([], [])),
        ipu_vertex_type=IpuConvVertexType.ConvPartial1x1), np.ones((3, 8, 8), np.float32))
    np.testing.assert_array_equal(out.array, np.full((3, 8, 8), 8, np.float32))
    copied = run("cpu", lambda x: tessellate_ipu.tile_map(
        lax.copy_p, tessellate_ipu.tile_put_sharded(x, TILES)), np.arange(3.0))
    np.testing.assert_array_equal(copied.array, np.arange(3.0))


def test_create_ipu_tile_primitive_runs_its_multivertex(codelets):
    scale_rows_p = create_ipu_tile_primitive(
        "scale_rows", "ScaleRows<{x}>", inputs=["x", "w"],
        outputs={"x": 0, "total": ShapedArray((1,), np.float32)},
        constants={"worker_offsets": lambda inavals, *_: make_ipu_vector1d_worker_offsets(
            inavals[0].size, vector_size=2, wdtype=np.uint16)},
        tmp_space=ShapedArray((6,), np.float32), gp_filename=codelets, perf_estimate=77)
    x = np.arange(3 * 24, dtype=np.float32).reshape(3, 24)
    w = np.array([[1.0], [2.0], [0.5]], np.float32)

    def f(x, w):
        return tessellate_ipu.tile_map(scale_rows_p, tessellate_ipu.tile_put_sharded(x, TILES),
                                       tessellate_ipu.tile_put_sharded(w, TILES), scale=3.0)

    for platform in ("ipu", "cpu"):
        scaled, total = run(platform, f, x, w)
        np.testing.assert_array_equal(scaled.array, x * 3 * w)
        np.testing.assert_allclose(total.array[:, 0], (x * 3 * w).sum(1), rtol=1e-6)

    # The same vertex declared by declare_ipu_tile_primitive (v2): the same results.
    @declare_ipu_tile_primitive("ScaleRows<{x}>", gp_filename=codelets)
    def scale_rows_v2_p(x, w):
        return ({"x": x, "total": ShapedArray((1,), x.dtype)},
                {"worker_offsets": make_ipu_vector1d_worker_offsets(x.size)},
                {"tmp": ShapedArray((6,), x.dtype)}, 77)

    scaled, total = run("ipu", lambda x, w: tessellate_ipu.tile_map(
        scale_rows_v2_p, tessellate_ipu.tile_put_sharded(x, TILES),
        tessellate_ipu.tile_put_sharded(w, TILES), scale=3.0), x, w)
    np.testing.assert_array_equal(scaled.array, x * 3 * w)


def test_a_translation_rule_with_outputs_from_parameters(codelets):
    arange_p = jax.extend.core.Primitive("compat_arange")

    def translation(p, tiles, inavals, attributes):
        dtype = attributes["dtype"]
        out = ShapedArray((attributes["size"],), dtype)
        ipu_type = from_numpy_dtype_to_ipu_type(dtype)
        return IpuTileMapEquation(
            vname=f"Arange<{ipu_type.name.lower()}>", pname=p.name, tiles=tiles,
            inputs_info=[make_ipu_vertex_in_info("scales", inavals[0],
                                                 vertex_dim2=inavals[0].shape[1]),
                         make_ipu_vertex_constant_info("global_scale", np.array(7, dtype),
                                                       vertex_dim2=-1)],
            outputs_info=[make_ipu_vertex_out_info("out", out)],
            gp_filename=codelets, perf_estimate=attributes["size"] + 5)

    register_ipu_tile_primitive(arange_p, translation)
    scales = np.stack([np.full((2, 5), k + 1, np.float32) for k in range(3)])

    def f(s):
        return tessellate_ipu.tile_map(arange_p, tessellate_ipu.tile_put_sharded(s, TILES),
                                       size=5, dtype=np.float32)

    out = run("ipu", f, scales).array
    np.testing.assert_array_equal(out, np.arange(5) * scales[:, 0] * scales[:, 1] * 7)
    with pytest.raises(KeyError, match="already registered"):
        register_ipu_tile_primitive(arange_p, translation)


def test_poplar_codelets_are_a_clear_error():
    popops_p = jax.extend.core.Primitive("popops_thing")
    register_ipu_tile_primitive(popops_p, lambda p, tiles, inavals, attributes:
                                IpuTileMapEquation("popops::Fill<float>", p.name, tiles))
    with pytest.raises(IpuTileTypeError, match="Poplar's built-in codelets"):
        tessellate_ipu.tile_map(popops_p, tile.tile_put_sharded(np.ones((3, 2)), TILES))


def test_devices_cycle_counts_and_random_by_tessellate_names():
    from jax_ipu.tessellate.core import hw_cycle_count_p, ipu_cycle_count_overhead
    from jax_ipu.tessellate.lax.tile_random import ipu_random_uniform_p
    from jax_ipu.tessellate.utils import IpuDevice, IpuTargetType, is_ipu_model

    device = jax.devices("ipu")[0]
    assert isinstance(device, IpuDevice) and not isinstance(jax.devices("cpu")[0], IpuDevice)
    assert is_ipu_model(device) and device.target_type == IpuTargetType.IPU_MODEL
    assert ipu_cycle_count_overhead() == 45

    def f(x):
        a = tessellate_ipu.tile_put_sharded(x, TILES)
        a, start = tessellate_ipu.tile_map(hw_cycle_count_p, a)
        a, end = tessellate_ipu.core.ipu_hw_cycle_count(a)
        u = tessellate_ipu.tile_map(ipu_random_uniform_p, size=8, dtype=np.float32, offset=0.0,
                                    scale=2.0, tiles=TILES)
        return start, end, u

    start, end, u = run("ipu", f, np.ones((3, 4), np.float32))
    np.testing.assert_array_equal(tile.cycles_of(end.array) - tile.cycles_of(start.array), 45)
    assert u.shape == (3, 8) and u.array.min() >= -1 and u.array.max() < 1


def test_worker_offsets_as_tessellate_computes_them():
    expected = {4: [0, 1, 2, 2, 2, 2, 2], 16: [0, 2, 4, 6, 8, 8, 8],
                36: [0, 3, 6, 9, 12, 15, 18], 128: [0, 11, 22, 33, 44, 55, 64]}
    for n, offsets in expected.items():
        np.testing.assert_array_equal(make_ipu_vector1d_worker_offsets(n, 2, 6, np.int16),
                                      offsets)
    from jax_ipu.tessellate.core import make_ipu_vector1d_worker_offsets_and_sizes

    np.testing.assert_array_equal(
        make_ipu_vector1d_worker_offsets_and_sizes(14, 2, grain_size=4, allow_overlap=True),
        [[0, 2], [2, 2], [4, 2], [5, 2], [0, 0], [0, 0]])


def test_arrays_on_other_tiles_are_a_clear_error():
    from jax_ipu.errors import IpuTileError

    pair_p = jax.extend.core.Primitive("compat_pair")
    register_ipu_tile_primitive(pair_p, lambda p, tiles, inavals, attributes: None)
    with pytest.raises(IpuTileError, match="argument 1 lives on other tiles"):
        tessellate_ipu.tile_map(pair_p, tile.tile_put_sharded(np.ones((3, 2)), TILES),
                                tile.tile_put_sharded(np.ones((3, 2)), (5, 6, 7)))
