"""Linear algebra for platform "ipu" as plain HLO: one lowering rule per jax linalg primitive.

An IPU has no LAPACK: each rule is loops of matrix-vector work traced from jax code, no call.
Real and complex matrices alike (complex64 runs as pairs of float32). The routines Graphcore's
XLA backend hands to a library (Cholesky and triangular solves to PopLibs' poplin, QR to XLA's
blocked expander) are marked as composites named after the routine: XLA:CPU runs their
decomposition for the numbers, the model costs the routine (jax_ipu/model/linalg.py)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_ipu import _internals as jx
from jax_ipu.compiler.lowering import householder
from jax_ipu.compiler.lowering.tracing import Rule, over_batch
from jax_ipu.compiler.program import LIBRARY_COMPOSITE_PREFIX

_MAX_JACOBI_SWEEPS = 20

# Primitives whose platform-independent jax rule already is plain HLO: the ipu rule is that
# rule, traced as one device's computation (see tracing.decomposition).
_GENERIC = (jx.lu_p, jx.lu_pivots_to_permutation_p, jx.qr_p, jx.ormqr_p, jx.svd_p,
            jx.tridiagonal_solve_p, jx.cholesky_update_p, jx.symmetric_product_p)

_EIG_REFUSED = (
    "eig on ipu: jax computes a general matrix's eigenvalues and eigenvectors only with LAPACK "
    "(cpu) or cuSOLVER and MAGMA (gpu), and jax-ipu has no HLO decomposition of the "
    "nonsymmetric eigenproblem, so it refuses eig. For a symmetric (or Hermitian) matrix use "
    "jnp.linalg.eigh; otherwise run eig on the cpu device "
    "(jax.device_put(a, jax.devices('cpu')[0])).")
_SCHUR_REFUSED = (
    "schur on ipu: jax computes a Schur decomposition only with LAPACK, and jax-ipu has no HLO "
    "decomposition of it, so it refuses schur. For a symmetric (or Hermitian) matrix "
    "jnp.linalg.eigh gives the same factorization; otherwise run schur on the cpu device "
    "(jax.device_put(a, jax.devices('cpu')[0])).")


def _cholesky(a: Any) -> Any:
    """Lower Cholesky factor of one matrix by outer products (reads the lower triangle; the
    diagonal's imaginary part, if any, is ignored, as LAPACK's is); all NaN when the matrix is
    not positive definite, as LAPACK's result is in JAX: potrf stops at the first pivot that is
    not > 0, so a singular positive semi-definite matrix (a zero pivot) is refused too."""
    n = a.shape[-1]
    if n == 0:  # fori_loop traces its body even for no steps, and w[j, j] has no element
        return a
    rows = jnp.arange(n)

    def step(j: Any, w: Any) -> Any:
        pivot = jnp.real(w[j, j])
        d = jnp.where(pivot > 0, jnp.sqrt(pivot), jnp.nan).astype(w.dtype)
        col = jnp.where(rows > j, w[:, j] / d, 0)
        w = w - jnp.outer(col, jnp.conj(col))
        return w.at[:, j].set(jnp.where(rows == j, d, col))

    low = jnp.tril(lax.fori_loop(0, n, step, a))
    return jnp.where(jnp.isnan(low).any(), jnp.nan, low)


def _triangular_solve(a: Any, b: Any, *, left_side: bool, lower: bool, transpose_a: bool,
                      conjugate_a: bool, unit_diagonal: bool) -> Any:
    """Substitution row by row for one system; a right-side solve X op(A) = B is solved as
    op(A)^T X^T = B^T."""
    if conjugate_a:
        a = jnp.conj(a)
    if not left_side:
        b = b.T
        transpose_a = not transpose_a
    if transpose_a:
        a = a.T
        lower = not lower
    n = a.shape[0]
    if n == 0:  # no unknowns; the loop body could not even be traced (b[i] has no row)
        return b if left_side else b.T
    cols = jnp.arange(n)

    def step(k: Any, x: Any) -> Any:
        i = k if lower else n - 1 - k
        done = cols < i if lower else cols > i
        row = (b[i] - jnp.where(done, a[i], 0) @ x)
        return x.at[i].set(row if unit_diagonal else row / a[i, i])

    x = lax.fori_loop(0, n, step, jnp.zeros_like(b))
    return x if left_side else x.T


def _round_robin(m: int) -> tuple[np.ndarray, np.ndarray]:
    """For even m, m-1 rounds of m/2 disjoint index pairs covering every pair once (the circle
    method), so one round's rotations can be applied at once."""
    players = list(range(m))
    tops, bots = [], []
    for _ in range(m - 1):
        tops.append(players[: m // 2])
        bots.append(players[m // 2:][::-1])
        players = [players[0], players[-1], *players[1:-1]]
    return np.asarray(tops, np.int32), np.asarray(bots, np.int32)


def _jacobi_eigh(a: Any, *, lower: bool, sort_eigenvalues: bool,
                 subset_by_index: tuple[int, int] | None) -> tuple[Any, Any]:
    """Eigenvectors and eigenvalues of one real symmetric or complex Hermitian matrix (from its
    `lower` or upper triangle) by parallel cyclic Jacobi rotations, sweeping until the
    off-diagonal part is below rounding. A complex pair is first turned real by a phase on
    its second row and column (a_pq = |a_pq| e^{i phi}), then rotated as a real one."""
    n = a.shape[0]
    hermitian = jnp.iscomplexobj(a)
    # the diagonal's imaginary part is ignored, as LAPACK's heevd ignores it
    diagonal = jnp.diag(jnp.real(jnp.diagonal(a))).astype(a.dtype)
    a = jnp.tril(a, -1) + jnp.tril(a, -1).conj().T if lower else \
        jnp.triu(a, 1) + jnp.triu(a, 1).conj().T
    a = a + diagonal
    # An odd size gets one zero row and column: rotations never mix it with the rest.
    m = n + n % 2
    a = jnp.pad(a, ((0, m - n), (0, m - n)))
    tops, bots = (jnp.asarray(t) for t in _round_robin(m))
    eps = jnp.finfo(a.dtype).eps
    target = eps * jnp.linalg.norm(a)

    def rotate(r: Any, carry: tuple[Any, Any]) -> tuple[Any, Any]:
        w, v = carry
        p, q = tops[r], bots[r]
        app, aqq, apq = jnp.real(w[p, p]), jnp.real(w[q, q]), w[p, q]
        if hermitian:
            size = jnp.abs(apq)
            phase = jnp.where(size == 0, 1, apq / jnp.where(size == 0, 1, size)).astype(w.dtype)
            w = w.at[q].multiply(phase[:, None]).at[:, q].multiply(jnp.conj(phase))
            v = v.at[:, q].multiply(jnp.conj(phase))
            apq = size
        skip = apq == 0
        tau = (aqq - app) / (2 * jnp.where(skip, 1, apq))
        t = jnp.where(tau >= 0, 1, -1) / (jnp.abs(tau) + jnp.sqrt(1 + tau * tau))
        c = jnp.where(skip, 1, lax.rsqrt(1 + t * t))
        s = jnp.where(skip, 0, t * c)
        wp, wq = w[p], w[q]
        w = w.at[p].set(c[:, None] * wp - s[:, None] * wq).at[q].set(
            s[:, None] * wp + c[:, None] * wq)
        wp, wq = w[:, p], w[:, q]
        w = w.at[:, p].set(wp * c - wq * s).at[:, q].set(wp * s + wq * c)
        vp, vq = v[:, p], v[:, q]
        v = v.at[:, p].set(vp * c - vq * s).at[:, q].set(vp * s + vq * c)
        return w, v

    def off_diagonal(w: Any) -> Any:
        return jnp.linalg.norm(w - jnp.diag(jnp.diag(w)))

    def unfinished(state: tuple[Any, Any, Any]) -> Any:
        w, _, sweeps = state
        return (sweeps < _MAX_JACOBI_SWEEPS) & (off_diagonal(w) > target)

    def sweep(state: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:
        w, v, sweeps = state
        w, v = lax.fori_loop(0, m - 1, rotate, (w, v))
        return w, v, sweeps + 1

    w, v, _ = lax.while_loop(unfinished, sweep, (a, jnp.eye(m, dtype=a.dtype), 0))
    values, vectors = jnp.real(jnp.diag(w))[:n], v[:n, :n]
    if sort_eigenvalues or subset_by_index is not None:
        order = jnp.argsort(values)
        values, vectors = values[order], vectors[:, order]
    if subset_by_index is not None:
        lo, hi = subset_by_index
        values, vectors = values[lo:hi], vectors[:, lo:hi]
    return vectors, values


def _per_matrix(fn: Callable[..., Any], *, multiple_results: bool, routine: str = "") -> Rule:
    """A rule applying `fn` (of one matrix, with the primitive's parameters) to each matrix of
    the leading batch dimensions. With a `routine`, a real computation is one composite of that
    name (LIBRARY_COMPOSITE_PREFIX + routine) whose attributes are the primitive's boolean
    parameters, so that the model reads it as the library's routine; its decomposition is the
    same computation, so the numbers are too. Complex matrices (PopLibs has no complex
    routines) and programs lowered for several platforms at once stay unmarked (an expansion)."""

    def rule(ctx: Any, *args: Any, **params: Any) -> Any:
        aval = ctx.avals_in[0]
        # Parameters are bound before vmap, which would otherwise map them like operands.
        one = functools.partial(fn, **params)
        batched = over_batch(one, aval.ndim - 2)
        # A program lowered for several platforms (jax.export's ("cpu", "ipu")) passes its
        # functions a platform index that a composite's operands leave out: unmarked there.
        real = not np.issubdtype(aval.dtype, np.complexfloating)
        if routine and real and len(ctx.module_context.platforms) == 1:
            flags = {k: v for k, v in params.items() if isinstance(v, bool)}
            marked = lax.composite(lambda *xs, **_: batched(*xs),
                                   name=LIBRARY_COMPOSITE_PREFIX + routine)
            return jx.lower_fun(functools.partial(marked, **flags),
                                multiple_results=multiple_results)(ctx, *args)
        return jx.lower_fun(batched, multiple_results=multiple_results)(ctx, *args)

    return rule


def _eigh(ctx: Any, a: Any, *, lower: bool, sort_eigenvalues: bool,
          subset_by_index: tuple[int, int] | None, algorithm: Any) -> Any:
    aval, = ctx.avals_in
    if algorithm == jx.EighImplementation.QR:
        raise NotImplementedError("eigh with the QR algorithm is LAPACK's; on ipu use the "
                                  "default (QDWH) or JACOBI")
    if algorithm == jx.EighImplementation.JACOBI or aval.shape[-1] == 0:
        return _per_matrix(_jacobi_eigh, multiple_results=True)(
            ctx, a, lower=lower, sort_eigenvalues=sort_eigenvalues,
            subset_by_index=subset_by_index)
    # QDWH spectral divide and conquer (TPU's), which ends in JACOBI-sized blocks.
    return jx.lower_fun(jx.eigh_qdwh, multiple_results=True)(
        ctx, a, lower=lower, sort_eigenvalues=sort_eigenvalues, subset_by_index=subset_by_index)


def _refused(message: str) -> Rule:
    def rule(ctx: Any, *args: Any, **params: Any) -> Any:
        raise NotImplementedError(message)

    return rule


def rules() -> dict[Any, Rule]:
    """Every linalg primitive's ipu rule (each to be traced with tracing.decomposition)."""
    return {
        jx.cholesky_p: _per_matrix(_cholesky, multiple_results=False, routine="cholesky"),
        jx.triangular_solve_p: _per_matrix(_triangular_solve, multiple_results=False,
                                           routine="triangular_solve"),
        jx.geqrf_p: _per_matrix(householder.geqrf, multiple_results=True, routine="qr"),
        jx.householder_product_p: _per_matrix(householder.householder_product,
                                              multiple_results=False,
                                              routine="householder_product"),
        jx.hessenberg_p: _per_matrix(householder.hessenberg, multiple_results=True),
        jx.tridiagonal_p: _per_matrix(householder.tridiagonal, multiple_results=True),
        jx.eigh_p: _eigh,
        jx.eig_p: _refused(_EIG_REFUSED),
        jx.schur_p: _refused(_SCHUR_REFUSED),
        **{prim: jx.generic_lowering(prim) for prim in _GENERIC},
    }
