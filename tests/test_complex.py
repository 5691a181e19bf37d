"""complex64 on the ipu platform: FFTs, scipy.signal and complex arithmetic give cpu's numbers
(both run XLA:CPU), and the model holds each value as two float32."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.signal as jss
import numpy as np
import pytest
import scipy.linalg

RNG = np.random.default_rng(0)


def _real(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _complex(*shape):
    return (_real(*shape) + 1j * _real(*shape)).astype(np.complex64)


def _on(platform, fn, *args):
    device = jax.devices(platform)[0]
    out = jax.jit(fn)(*jax.device_put(args, device))
    return jax.tree.map(np.asarray, out)


CASES = {
    "fft": (jnp.fft.fft, (_complex(4, 96),)),
    "ifft": (jnp.fft.ifft, (_complex(4, 64),)),
    "rfft": (jnp.fft.rfft, (_real(3, 100),)),
    "irfft": (lambda z: jnp.fft.irfft(z, n=30), (_complex(5, 16),)),
    "fftn": (lambda z: jnp.fft.fftn(z, axes=(0, 1, 2)), (_complex(4, 6, 8),)),
    "rfft2": (jnp.fft.rfft2, (_real(2, 16, 12),)),
    "arithmetic": (lambda a, b: (a * b / (b + 2), jnp.exp(a) - jnp.log(b), jnp.abs(a),
                                 jnp.sqrt(a), jnp.conj(a) == a, a.real * b.imag),
                   (_complex(33), _complex(33))),
    "matmul": (jnp.matmul, (_complex(8, 24), _complex(24, 5))),
    "sum": (lambda z: (z.sum(axis=0), jnp.cumsum(z, axis=1)), (_complex(7, 9),)),
    "fftconvolve": (lambda a, b: jss.fftconvolve(a, b, mode="same"), (_real(40), _real(9))),
    "welch": (lambda x: jss.welch(x, nperseg=32), (_real(256),)),
    "stft_istft": (lambda x: jss.istft(jss.stft(x, nperseg=16)[2], nperseg=16), (_real(128),)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_ipu_gives_cpus_numbers(name):
    fn, args = CASES[name]
    ipu, cpu = _on("ipu", fn, *args), _on("cpu", fn, *args)
    for got, want in zip(jax.tree.leaves(ipu), jax.tree.leaves(cpu), strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_gradient_through_an_fft():
    def loss(x):
        return jnp.sum(jnp.abs(jnp.fft.rfft(x)) ** 2)

    x = _real(64)
    ipu = _on("ipu", jax.grad(loss), x)
    np.testing.assert_array_equal(ipu, _on("cpu", jax.grad(loss), x))
    # Parseval: the full spectrum's energy is 64 |x|^2, whose gradient is 128 x
    full = _on("ipu", jax.grad(lambda v: jnp.sum(jnp.abs(jnp.fft.fft(v)) ** 2)), x)
    np.testing.assert_allclose(full, 128 * x, rtol=1e-4, atol=1e-3)


def test_complex64_arguments_take_eight_bytes_each():
    x = jax.device_put(_complex(1024), jax.devices("ipu")[0])
    assert x.dtype == jnp.complex64
    stats = jax.jit(jnp.fft.fft).lower(x).compile().memory_analysis()
    assert stats.argument_size_in_bytes == 8 * 1024 == stats.output_size_in_bytes


def test_complex128_is_refused_like_float64():
    x = np.ones(4, np.complex64)
    with jax.enable_x64(True), pytest.raises(jax.errors.JaxRuntimeError) as err:
        jax.jit(lambda z: jnp.fft.fft(z.astype(jnp.complex128)))(
            jax.device_put(x, jax.devices("ipu")[0]))
    msg = str(err.value)
    assert "has no complex128" in msg and "use complex64" in msg


def _hermitian(n):
    a = _complex(n, n)
    return (a @ a.conj().T + n * np.eye(n)).astype(np.complex64)


LINALG = {
    "cholesky": (jnp.linalg.cholesky, (_hermitian(6),)),
    "solve": (jnp.linalg.solve, (_complex(5, 5), _complex(5, 2))),
    "inv_det": (lambda a: (jnp.linalg.inv(a), jnp.linalg.det(a)), (_complex(4, 4),)),
    "triangular": (lambda a, b: jax.scipy.linalg.solve_triangular(a, b, lower=True,
                                                                  trans="C"),
                   (np.tril(_complex(5, 5)) + 4 * np.eye(5, dtype=np.complex64),
                    _complex(5, 3))),
}


@pytest.mark.parametrize("name", list(LINALG))
def test_complex_linear_algebra_agrees_with_cpu(name):
    # HLO decompositions on ipu, LAPACK on cpu: the same results up to rounding
    fn, args = LINALG[name]
    for got, want in zip(jax.tree.leaves(_on("ipu", fn, *args)),
                         jax.tree.leaves(_on("cpu", fn, *args)), strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_complex_factorizations_reconstruct_their_matrix():
    h, a = _hermitian(6), _complex(6, 4)
    w, v = _on("ipu", jnp.linalg.eigh, h)
    np.testing.assert_allclose(v @ np.diag(w) @ v.conj().T, h, atol=1e-4)
    q, r = _on("ipu", jnp.linalg.qr, a)
    np.testing.assert_allclose(q @ r, a, atol=1e-5)
    np.testing.assert_allclose(q.conj().T @ q, np.eye(4), atol=1e-5)


@pytest.mark.parametrize("lower", [True, False])
def test_hermitian_tridiagonal_is_lapacks_chetrd(lower):
    # LAPACK reads one triangle and the diagonal's real part; so must the ipu rule
    a = _complex(5, 5)
    got = _on("ipu", lambda x: jax.lax.linalg.tridiagonal(x, lower=lower), a)
    *want, info = scipy.linalg.lapack.chetrd(a, lower=lower)
    assert info == 0 and got[1].dtype == got[2].dtype == np.float32
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
