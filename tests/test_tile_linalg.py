"""Linear algebra on tiles against numpy and scipy: Householder QR, Hessenberg (a row per tile, and
several rows per tile), the parallel Jacobi eigensolver; the round-robin pairing; and the model's
cycles for each MultiVertex codelet per tile, from its declared estimate."""

from __future__ import annotations

import itertools

import jax
import numpy as np
import pytest
import scipy.linalg

import jax_ipu
from jax_ipu.tile import build, linalg, validate

N = 16
RNG = np.random.default_rng(42)
X = RNG.standard_normal((N, N)).astype(np.float32)
X = (X + X.T) / 2  # symmetric, as TessellateIPU's tests use


@pytest.fixture(scope="module", autouse=True)
def _cache(tmp_path_factory):
    saved = build.cache_dir
    build.cache_dir = lambda: tmp_path_factory.getbasetemp() / "vertex-cache"
    yield
    build.cache_dir = saved


def compiled(fn, *args):
    ipu = jax.devices("ipu")[0]
    return jax.jit(fn).lower(*(jax.device_put(a, ipu) for a in args)).compile()


def on_ipu(fn, *args):
    ipu = jax.devices("ipu")[0]
    return compiled(fn, *args)(*(jax.device_put(a, ipu) for a in args))


def test_qr_matches_numpy_and_the_model_costs_each_vertex():
    signs = np.sign(np.diag(X)).astype(np.float32)
    program = compiled(linalg.ipu_qr, X, signs)
    q, rt = program(*(jax.device_put(a, jax.devices("ipu")[0]) for a in (X, signs)))
    q_np, r_np = np.linalg.qr(X)
    np.testing.assert_allclose(np.abs(np.asarray(q.array)), np.abs(q_np), atol=1e-5)
    np.testing.assert_allclose(np.abs(np.asarray(rt.array)), np.abs(r_np.T), atol=1e-5)
    np.testing.assert_allclose(np.asarray(q.array) @ np.asarray(rt.array).T, X, atol=1e-5)
    assert q.tiles == tuple(range(N)) and rt.tiles == tuple(range(N, 2 * N))
    by_vertex = {}
    for v in jax_ipu.report(program).tiles["vertices"]:
        by_vertex.setdefault(v["vertex"], []).append(v)
    # Declared estimates: a launch (190) and the bytes streamed at 8 a cycle; the correction
    # vector adds worker 0's gather (60 instructions, every 6th cycle).
    first_dot = by_vertex["DotProduct1d"][0]
    assert first_dot["cycles_per_tile"] == 190 + 8 * N / 8 and len(first_dot["tiles"]) == N
    (first_correction, *_) = by_vertex["QRCorrectionVector"]
    assert first_correction["cycles_per_tile"] == 190 + 8 * N / 8 + 6 * 60
    assert first_correction["tiles"] == [N]  # R's first column, on its own tile
    assert by_vertex["QRHouseholderRowUpdate"][0]["cycles_per_tile"] == 190 + 12 * N / 8
    assert len(by_vertex["QRCorrectionVector"]) == N - 1


def test_hessenberg_matches_scipy():
    q, h = on_ipu(linalg.ipu_hessenberg, X)
    h_sp, q_sp = scipy.linalg.hessenberg(X, calc_q=True)
    np.testing.assert_allclose(np.abs(np.asarray(q.array)), np.abs(q_sp), atol=1e-4)
    np.testing.assert_allclose(np.abs(np.asarray(h.array)), np.abs(h_sp), atol=1e-4)


def test_hessenberg_with_several_rows_a_tile(monkeypatch):
    """On a chip too small for a row a tile, Q and R share tiles, two rows each (as
    TessellateIPU's Hessenberg does past 736 rows)."""
    monkeypatch.setattr(linalg, "chip_tiles", lambda: (5, "ipu2"))
    x = X[:8, :8]
    q, h = on_ipu(linalg.ipu_hessenberg, x)
    assert q.tiles == h.tiles == (0, 0, 1, 1, 2, 2, 3, 3)
    h_sp, q_sp = scipy.linalg.hessenberg(x, calc_q=True)
    np.testing.assert_allclose(np.abs(np.asarray(q.array)), np.abs(q_sp), atol=1e-4)
    np.testing.assert_allclose(np.abs(np.asarray(h.array)), np.abs(h_sp), atol=1e-4)
    assert validate.chip_tiles()[0] == 1472  # only the linalg's view was narrowed


@pytest.mark.parametrize("platform", ["ipu", "cpu"])
def test_eigh_matches_numpy(platform):
    device = jax.devices(platform)[0]
    vectors, values = jax.jit(lambda x: linalg.ipu_eigh(x, num_iters=5))(
        jax.device_put(X, device))
    values_np, vectors_np = np.linalg.eigh(X)
    np.testing.assert_allclose(np.asarray(values), values_np, atol=1e-5)
    np.testing.assert_allclose(np.abs(np.asarray(vectors)), np.abs(vectors_np), atol=1e-5)
    _, unsorted = jax.jit(lambda x: linalg.ipu_eigh(x, sort_eigenvalues=False, num_iters=5))(
        jax.device_put(X, device))
    np.testing.assert_allclose(np.sort(np.asarray(unsorted)), values_np, atol=1e-5)


def test_round_robin_meets_every_pair_once_a_sweep():
    n = 10
    rotset = linalg.jacobi_initial_rotation_set(n)
    met = []
    for _ in range(n - 1):
        rotset = linalg.jacobi_next_rotation_set(rotset)
        met += [tuple(p) for p in linalg.jacobi_sort_rotation_set(rotset)]
    assert sorted(met) == list(itertools.combinations(range(n), 2))
    np.testing.assert_array_equal(rotset, linalg.jacobi_initial_rotation_set(n))


def test_bad_inputs_are_clear_errors():
    with pytest.raises(Exception, match="square matrix of even size"):
        linalg.ipu_qr(np.ones((3, 3), np.float32), np.ones(3, np.float32))
    with pytest.raises(Exception, match="must be float32"):
        linalg.ipu_eigh(np.ones((4, 4), np.float64))
