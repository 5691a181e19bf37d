"""Linear algebra on ipu against jax on CPU: jnp.linalg and jax.scipy.linalg through the HLO-only
lowerings of jax_ipu/compiler/lowering/, with no custom calls left in the program."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest

IPU = jax.devices("ipu")[0]
CPU = jax.devices("cpu")[0]
# JAX's linalg tests compare float32 results with tolerances of this order (jtu's float32
# default 1e-6 relative, scaled by the condition of the problem they build).
RTOL = 1e-4
ATOL = 1e-4


def _rng() -> np.random.RandomState:
    return np.random.RandomState(0)


def _spd(n: int, batch: tuple[int, ...] = ()) -> np.ndarray:
    a = _rng().randn(*batch, n, n).astype(np.float32)
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n, dtype=np.float32)


def _on(device, fn, *args):
    return jax.jit(fn)(*(jax.device_put(a, device) for a in args))


def _both(fn, *args):
    ipu, cpu = _on(IPU, fn, *args), _on(CPU, fn, *args)
    for leaf in jax.tree.leaves(ipu):
        assert leaf.devices() == {IPU}
    return jax.tree.map(np.asarray, ipu), jax.tree.map(np.asarray, cpu)


def test_programs_have_no_custom_calls():
    a = _spd(5)
    for fn in (jnp.linalg.cholesky, jnp.linalg.qr, jnp.linalg.eigh, jnp.linalg.svd,
               jnp.linalg.inv, jnp.linalg.det, jsl.lu):
        text = jax.jit(fn).lower(jax.device_put(a, IPU)).as_text()
        assert "custom_call" not in text, fn


@pytest.mark.parametrize("batch", [(), (2,)])
def test_cholesky(batch):
    a = _spd(6, batch)
    got, want = _both(jnp.linalg.cholesky, a)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(np.triu(got[..., :, :], 1), 0)


def test_cholesky_not_positive_definite_is_nan_like_cpu():
    a = -np.eye(3, dtype=np.float32)
    got, want = _both(jnp.linalg.cholesky, a)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got).any()


def test_cholesky_of_a_singular_semi_definite_matrix_is_nan_like_cpu():
    """A zero pivot is not positive: LAPACK's potrf refuses it (before: a finite factor)."""
    rank_3 = np.diag([2.0, 2.0, 3.0, 0.0]).astype(np.float32)
    rank_3[:2, :2] = 1.0  # exact arithmetic: the second pivot is exactly 0
    a = np.stack([np.ones((4, 4), np.float32), rank_3, _spd(4)])
    got, want = _both(jnp.linalg.cholesky, a)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    lower = np.tril(np.ones((4, 4), bool))
    assert np.isnan(got[:2][:, lower]).all() and not np.isnan(got[2]).any()
    # upstream random_lax_test::testMultivariateNormalSingularCovariance
    draw = lambda mean, cov: jax.random.multivariate_normal(  # noqa: E731
        jax.random.key(0), mean, cov, method="cholesky")
    got, want = _both(draw, np.zeros(2, np.float32), np.ones((2, 2), np.float32))
    assert np.isnan(got).all() and np.isnan(want).all()


@pytest.mark.parametrize("shape,mode", [((6, 4), "reduced"), ((6, 4), "complete"),
                                        ((2, 4, 6), "reduced"), ((5, 5), "complete")])
def test_qr(shape, mode):
    a = _rng().randn(*shape).astype(np.float32)
    (q, r), (qc, rc) = _both(lambda x: jnp.linalg.qr(x, mode=mode), a)
    # Same reflector sign convention as LAPACK: Q and R match CPU, not just up to signs.
    np.testing.assert_allclose(q, qc, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(r, rc, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(q @ r, a, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("n,batch", [(1, ()), (5, ()), (8, (3,))])
def test_eigh(n, batch):
    a = _spd(n, batch) - n * np.eye(n, dtype=np.float32)  # indefinite: negative eigenvalues too
    (w, v), (wc, _) = _both(jnp.linalg.eigh, a)
    np.testing.assert_allclose(w, wc, rtol=RTOL, atol=ATOL * n)
    np.testing.assert_allclose(a @ v, v * w[..., None, :], rtol=RTOL, atol=ATOL * n)
    eye = np.broadcast_to(np.eye(n, dtype=np.float32), v.shape)
    np.testing.assert_allclose(np.swapaxes(v, -1, -2) @ v, eye, atol=ATOL)


def test_eigh_upper_triangle_and_subset():
    a = np.triu(_spd(6))
    w_ipu, v_ipu = _on(IPU, lambda x: jax.lax.linalg.eigh(x, lower=False, symmetrize_input=False,
                                                        subset_by_index=(1, 4)), a)
    w_cpu = np.linalg.eigvalsh(a, UPLO="U")
    np.testing.assert_allclose(np.asarray(v_ipu), w_cpu[1:4], rtol=RTOL)
    assert w_ipu.shape == (6, 3)


@pytest.mark.parametrize("shape,full_matrices", [((6, 4), False), ((2, 4, 5), True)])
def test_svd(shape, full_matrices):
    a = _rng().randn(*shape).astype(np.float32)

    def both_forms(x):
        return jnp.linalg.svd(x, full_matrices=full_matrices), jnp.linalg.svd(x, compute_uv=False)

    ((u, s, vt), s_only), ((_, sc, _), _) = _both(both_forms, a)
    np.testing.assert_allclose(s, sc, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(s_only, sc, rtol=RTOL, atol=ATOL)
    k = min(shape[-2:])
    recon = (u[..., :, :k] * s[..., None, :]) @ vt[..., :k, :]
    np.testing.assert_allclose(recon, a, rtol=RTOL, atol=ATOL)


def test_lu_matches_cpu():
    a = _rng().randn(6, 6).astype(np.float32)
    got, want = _both(jsl.lu, a)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
    (lu, piv), (luc, pivc) = _both(jsl.lu_factor, a)
    np.testing.assert_array_equal(piv, pivc)
    np.testing.assert_allclose(lu, luc, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("fn", [
    lambda a, b: jnp.linalg.solve(a, b),
    lambda a, b: jnp.linalg.inv(a),
    lambda a, b: jnp.linalg.det(a),
    lambda a, b: jnp.linalg.slogdet(a),
    lambda a, b: jsl.cho_solve(jsl.cho_factor(a), b),
    lambda a, b: (jnp.linalg.lstsq(a[:, :4], b)[0], jnp.linalg.pinv(a[:, :4])),
], ids=["solve", "inv", "det", "slogdet", "cho_solve", "lstsq_pinv"])
def test_solvers(fn):
    a, b = _spd(6), _rng().randn(6, 2).astype(np.float32)
    got, want = _both(fn, a, b)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("left_side,lower,transpose_a,unit_diagonal", [
    (True, True, False, False), (True, False, True, True),
    (False, True, True, False), (False, False, False, True)])
def test_triangular_solve(left_side, lower, transpose_a, unit_diagonal):
    rng = _rng()
    a = (np.tril if lower else np.triu)(rng.randn(2, 5, 5)).astype(np.float32) + 5 * np.eye(5)
    b = rng.randn(2, 5, 3).astype(np.float32)
    if not left_side:
        b = np.swapaxes(b, -1, -2)

    def solve(a, b):
        return jax.lax.linalg.triangular_solve(a.astype(jnp.float32), b, left_side=left_side,
                                               lower=lower, transpose_a=transpose_a,
                                               unit_diagonal=unit_diagonal)

    got, want = _both(solve, a, b)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_gradients_through_linalg():
    a = _spd(4)

    def loss(x):
        return jnp.sum(jnp.linalg.eigh(x)[0] ** 2) + jnp.sum(jnp.linalg.cholesky(x))

    got, want = _both(jax.grad(loss), a)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (6, 6), (3, 5, 5)])
def test_hessenberg(shape):
    a = _rng().randn(*shape).astype(np.float32)
    (h, q), (hc, qc) = _both(lambda x: jsl.hessenberg(x, calc_q=True), a)
    # LAPACK's gehrd reflectors and signs: H and Q match CPU's, not just up to signs.
    np.testing.assert_allclose(h, hc, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(q, qc, rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(np.tril(h, -2), 0)
    np.testing.assert_allclose(q @ h @ np.swapaxes(q, -1, -2), a, rtol=RTOL, atol=ATOL)
    (raw, taus), (rawc, tausc) = _both(jax.lax.linalg.hessenberg, a)
    np.testing.assert_allclose(raw, rawc, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(taus, tausc, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (4, 4), (10, 10), (2, 5, 5)])
def test_tridiagonal_matches_cpu_and_lapack(shape, lower):
    import scipy.linalg

    a = _rng().randn(*shape).astype(np.float32)  # only one triangle is read
    got, want = _both(lambda x: jax.lax.linalg.tridiagonal(x, lower=lower), a)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
    # The same check as JAX's own linalg_test: LAPACK's ssytrd, output by output.
    for index in np.ndindex(*shape[:-2]):
        c, d, e, tau, info = scipy.linalg.lapack.ssytrd(a[index], lower=lower)
        assert info == 0
        for g, w in zip(got, (c, d, e, tau), strict=True):
            np.testing.assert_allclose(g[index], w, rtol=RTOL, atol=ATOL)


def test_tridiagonal_reconstructs_the_matrix():
    a = _spd(6)
    (arr, d, e, taus), _ = _both(lambda x: jax.lax.linalg.tridiagonal(x, lower=True), a)
    q = np.asarray(jax.jit(jax.lax.linalg.householder_product)(
        jax.device_put(arr[1:, :-1], IPU), jax.device_put(taus, IPU)))
    q = np.block([[np.ones((1, 1)), np.zeros((1, 5))], [np.zeros((5, 1)), q]])
    t = np.diag(d) + np.diag(e, -1) + np.diag(e, 1)
    np.testing.assert_allclose(q @ t @ q.T, a, rtol=RTOL, atol=ATOL * 10)


@pytest.mark.parametrize("fn, name", [(jnp.linalg.eig, "eig"), (jnp.linalg.eigvals, "eig"),
                                      (jsl.schur, "schur")])
def test_decompositions_without_an_hlo_form_are_refused_saying_why(fn, name):
    with pytest.raises(NotImplementedError,
                       match=f"^{name} on ipu: .*only with LAPACK.*no HLO decomposition") as info:
        jax.jit(fn).lower(jax.device_put(np.eye(3, dtype=np.float32), IPU))
    assert "eigh" in str(info.value) and "cpu" in str(info.value)


@pytest.mark.parametrize("name, fn, shapes", [
    ("inv", jnp.linalg.inv, [(0, 0)]),
    ("solve", jnp.linalg.solve, [(0, 0), (0,)]),
    ("cholesky", jnp.linalg.cholesky, [(0, 0)]),
    ("triangular_solve left", lambda a, b: jax.lax.linalg.triangular_solve(
        a, b, left_side=True, lower=True), [(0, 0), (0, 3)]),
    ("triangular_solve right", lambda a, b: jax.lax.linalg.triangular_solve(
        a, b, left_side=False, lower=False), [(0, 0), (3, 0)]),
    ("qr wide", jnp.linalg.qr, [(0, 3)]),
    ("qr tall", jnp.linalg.qr, [(3, 0)]),
    ("householder_product", jax.lax.linalg.householder_product, [(3, 0), (0,)]),
])
def test_empty_matrices_like_cpu(name, fn, shapes):
    args = [np.zeros(shape, np.float32) for shape in shapes]
    got, want = _both(fn, *args)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert g.shape == w.shape, name
        np.testing.assert_array_equal(g, w)
