"""Householder reductions of one matrix in LAPACK's storage forms, as plain jax loops: QR (geqrf),
the product of reflectors (orgqr), Hessenberg (gehrd) and tridiagonal (sytrd); for a complex
matrix the same loops are LAPACK's complex ones (zgeqrf, zungqr, zgehrd, zhetrd)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
from jax import lax


def _reflector(x: Any, pivot: Any, tail: Any) -> tuple[Any, Any, Any]:
    """LAPACK's dlarfg (zlarfg) on x[pivot] (alpha) and the entries of `x` where `tail` holds.

    Returns (beta, tau, v): H = I - tau v v^H, applied as H^H, maps alpha and the tail to beta
    (real) and zeros, v[pivot] is 1, v is x's tail scaled below the pivot's row set and 0
    elsewhere. LAPACK's sign choice (beta opposite to alpha's real part) makes the factors
    agree with CPU's up to rounding, not just signs."""
    rows = jnp.arange(x.shape[0])
    alpha = x[pivot]
    below = jnp.where(tail, x, 0)
    xnorm = jnp.linalg.norm(below)
    trivial = (xnorm == 0) & (jnp.imag(alpha) == 0)
    beta = -jnp.where(jnp.real(alpha) >= 0, 1, -1) * jnp.hypot(jnp.abs(alpha), xnorm)
    beta = jnp.where(trivial, alpha, beta.astype(x.dtype))
    tau = jnp.where(trivial, 0, (beta - alpha) / jnp.where(trivial, 1, beta))
    scale = jnp.where(trivial, 1, alpha - beta)
    v = jnp.where(rows == pivot, 1, below / scale).astype(x.dtype)
    return beta, tau, v


def geqrf(a: Any) -> tuple[Any, Any]:
    """Householder QR of one m x n matrix: R on and above the diagonal, the reflectors (unit
    leading entry implied) below it, and their scales tau."""
    m, n = a.shape
    k = min(m, n)
    rows, cols = jnp.arange(m), jnp.arange(n)

    def step(j: Any, carry: tuple[Any, Any]) -> tuple[Any, Any]:
        w, taus = carry
        x = w[:, j]
        beta, tau, v = _reflector(x, j, rows > j)
        update = jnp.where(cols > j, jnp.conj(tau) * (jnp.conj(v) @ w), 0)
        w = w - jnp.outer(v, update)
        w = w.at[:, j].set(jnp.where(rows < j, x, jnp.where(rows == j, beta, v)))
        return w, taus.at[j].set(tau)

    return lax.fori_loop(0, k, step, (a, jnp.zeros((k,), a.dtype)))


def householder_product(a: Any, taus: Any) -> Any:
    """The first n columns of H_0 H_1 ... H_{k-1} for reflectors stored as geqrf leaves them
    (LAPACK's orgqr), accumulated from the last reflector back."""
    m, n = a.shape
    k = taus.shape[0]
    if k == 0 or n == 0:  # no reflector to apply; fori_loop would still trace its body
        return jnp.eye(m, n, dtype=a.dtype)
    rows = jnp.arange(m)

    def step(s: Any, q: Any) -> Any:
        i = k - 1 - s
        v = jnp.where(rows > i, a[:, i], jnp.where(rows == i, 1, 0)).astype(a.dtype)
        return q - taus[i] * jnp.outer(v, jnp.conj(v) @ q)

    return lax.fori_loop(0, k, step, jnp.eye(m, n, dtype=a.dtype))


def hessenberg(a: Any) -> tuple[Any, Any]:
    """Upper Hessenberg form of one n x n matrix (LAPACK's gehrd with ilo=1, ihi=n): H on and
    above the first subdiagonal, reflector j's tail below it in column j, and the n-1 scales tau
    (the last is 0: nothing is left below the subdiagonal of column n-2)."""
    n = a.shape[0]
    if n <= 1:  # no reflector; fori_loop would still trace its body
        return a, jnp.zeros((max(n - 1, 0),), a.dtype)
    rows = cols = jnp.arange(n)

    def step(j: Any, carry: tuple[Any, Any]) -> tuple[Any, Any]:
        w, taus = carry
        x = w[:, j]
        beta, tau, v = _reflector(x, j + 1, rows > j + 1)
        # A := H^H A H, from the right on every row, then from the left on columns after j (v
        # is 0 up to row j, so column j is untouched and then takes beta and the reflector).
        w = w - tau * jnp.outer(w @ v, jnp.conj(v))
        w = w - jnp.conj(tau) * jnp.outer(v, jnp.where(cols > j, jnp.conj(v) @ w, 0))
        w = w.at[:, j].set(jnp.where(rows <= j, x, jnp.where(rows == j + 1, beta, v)))
        return w, taus.at[j].set(tau)

    return lax.fori_loop(0, n - 1, step, (a, jnp.zeros((n - 1,), a.dtype)))


def tridiagonal(a: Any, *, lower: bool) -> tuple[Any, Any, Any, Any]:
    """Tridiagonal form of one symmetric (or Hermitian) n x n matrix read from its `lower` (or
    upper) triangle, as LAPACK's sytrd (hetrd) returns it: (a with the diagonal, the
    off-diagonal and the reflectors in that triangle and the other triangle as given, real
    diagonal d, real off-diagonal e, scales tau).

    lower: reflector j annihilates column j below row j+1 (unit entry at j+1, tail below);
    upper: it annihilates column j+1 above row j (unit entry at j, tail above), last first."""
    n = a.shape[0]
    real = jnp.real(a[:0, :0]).dtype
    rows = jnp.arange(n)
    # A Hermitian matrix's diagonal is real: LAPACK reads its real part only, and returns it so.
    diagonal = jnp.real(jnp.diagonal(a))
    if n == 1:  # no reflector; fori_loop would still trace its body
        return diagonal.astype(a.dtype)[None], diagonal, jnp.zeros((0,), real), \
            jnp.zeros((0,), a.dtype)
    full = jnp.tril(a, -1) + jnp.tril(a, -1).conj().T if lower else \
        jnp.triu(a, 1) + jnp.triu(a, 1).conj().T
    full = full + jnp.diag(diagonal).astype(a.dtype)

    def step(s: Any, carry: tuple[Any, Any, Any, Any]) -> tuple[Any, Any, Any, Any]:
        w, vs, e, taus = carry
        if lower:
            j = s
            column, pivot, tail, block = j, j + 1, rows > j + 1, rows > j
        else:
            j = n - 2 - s
            column, pivot, tail, block = j + 1, j, rows < j, rows <= j
        beta, tau, v = _reflector(w[:, column], pivot, tail)
        # The block still to reduce becomes H^H A H, with sytd2's (hetd2's) rank-2 update:
        # p = tau A v, q = p - (tau/2)(p^H v) v, A := A - v q^H - q v^H.
        p = jnp.where(block, tau * (w @ v), 0)
        q = p - (tau / 2) * (jnp.conj(p) @ v) * v
        w = w - jnp.outer(v, jnp.conj(q)) - jnp.outer(q, jnp.conj(v))
        vs = vs.at[:, column].set(jnp.where(tail, v, 0))
        return w, vs, e.at[j].set(jnp.real(beta)), taus.at[j].set(tau)

    carry = (full, jnp.zeros_like(a), jnp.zeros((n - 1,), real), jnp.zeros((n - 1,), a.dtype))
    w, vs, e, taus = lax.fori_loop(0, n - 1, step, carry)
    d = jnp.real(jnp.diagonal(w))
    r, c = rows[:, None], rows[None, :]
    off = jnp.zeros_like(a).at[rows[:-1] + 1, rows[:-1]].set(e.astype(a.dtype))
    if lower:
        stored = jnp.where(r > c + 1, vs, jnp.where(r == c + 1, off, 0))
        mine = r >= c
    else:
        stored = jnp.where(c > r + 1, vs, jnp.where(c == r + 1, off.T, 0))
        mine = r <= c
    out = jnp.where(r == c, jnp.diag(d), jnp.where(mine, stored, a))
    return out, d, e, taus
