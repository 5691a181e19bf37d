"""jax.random on ipu gives the same bits as on CPU, for threefry and rbg keys and the
distributions upstream's random_test.py covers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

IPU = jax.devices("ipu")[0]
CPU = jax.devices("cpu")[0]

DISTRIBUTIONS = {
    "bits": lambda k: jax.random.bits(k, (7,), jnp.uint32),
    "uniform": lambda k: jax.random.uniform(k, (7,)),
    "normal": lambda k: jax.random.normal(k, (7,)),
    "randint": lambda k: jax.random.randint(k, (7,), -5, 9),
    "bernoulli": lambda k: jax.random.bernoulli(k, 0.3, (7,)),
    "categorical": lambda k: jax.random.categorical(k, jnp.log(jnp.arange(1.0, 5.0)), shape=(7,)),
    "choice": lambda k: jax.random.choice(k, 10, (4,), replace=False),
    "permutation": lambda k: jax.random.permutation(k, 9),
    "truncated_normal": lambda k: jax.random.truncated_normal(k, -1.0, 2.0, (7,)),
    "exponential": lambda k: jax.random.exponential(k, (7,)),
    "laplace": lambda k: jax.random.laplace(k, (7,)),
    "logistic": lambda k: jax.random.logistic(k, (7,)),
    "cauchy": lambda k: jax.random.cauchy(k, (7,)),
    "gumbel": lambda k: jax.random.gumbel(k, (7,)),
    "gamma": lambda k: jax.random.gamma(k, jnp.array([0.3, 1.0, 4.5])),
    "loggamma": lambda k: jax.random.loggamma(k, jnp.array([0.3, 1.0, 4.5])),
    "beta": lambda k: jax.random.beta(k, 2.0, 3.0, (5,)),
    "dirichlet": lambda k: jax.random.dirichlet(k, jnp.array([1.0, 2.0, 0.5])),
    "chisquare": lambda k: jax.random.chisquare(k, 3.0, (5,)),
    "f": lambda k: jax.random.f(k, 3.0, 4.0, (5,)),
    "t": lambda k: jax.random.t(k, 3.0, (5,)),
    "poisson": lambda k: jax.random.poisson(k, jnp.array([0.5, 3.0, 40.0])),
    "binomial": lambda k: jax.random.binomial(k, 10.0, 0.3, (5,)),
    "geometric": lambda k: jax.random.geometric(k, 0.3, (5,)),
    "pareto": lambda k: jax.random.pareto(k, 2.0, (5,)),
    "weibull_min": lambda k: jax.random.weibull_min(k, 1.5, 2.0, (5,)),
    "maxwell": lambda k: jax.random.maxwell(k, (5,)),
    "double_sided_maxwell": lambda k: jax.random.double_sided_maxwell(k, 0.0, 1.0, (5,)),
    "rayleigh": lambda k: jax.random.rayleigh(k, 1.0, (5,)),
    "wald": lambda k: jax.random.wald(k, 1.0, (5,)),
    "triangular": lambda k: jax.random.triangular(k, 0.0, 0.3, 1.0, (5,)),
    "generalized_normal": lambda k: jax.random.generalized_normal(k, 1.5, (5,)),
    "lognormal": lambda k: jax.random.lognormal(k, 0.5, (5,)),
    "rademacher": lambda k: jax.random.rademacher(k, (7,)),
    "ball": lambda k: jax.random.ball(k, 3, 2.0, (2,)),
    "split_fold_in": lambda k: jax.random.key_data(jax.random.fold_in(jax.random.split(k)[1], 7)),
}
# These draw through linear algebra (cholesky, eigh, QR), whose ipu lowerings are plain HLO and
# CPU's LAPACK: equal up to rounding, not bit for bit.
LINALG_DISTRIBUTIONS = {
    "multivariate_normal": lambda k: jax.random.multivariate_normal(
        k, jnp.zeros(3), jnp.array([[2.0, 0.5, 0.0], [0.5, 1.0, 0.2], [0.0, 0.2, 1.5]]), (4,)),
    "orthogonal": lambda k: jax.random.orthogonal(k, 4),
}


def _draw(device, impl: str, sample):
    def fn(seed):
        return sample(jax.random.key(seed, impl=impl))

    return np.asarray(jax.jit(fn)(jax.device_put(np.uint32(42), device)))


# The other key implementations share the samplers: their bits and the basic distributions.
RBG_NAMES = ("bits", "uniform", "normal", "randint", "bernoulli", "gamma", "split_fold_in")


@pytest.mark.parametrize("impl", ["threefry2x32", "rbg", "unsafe_rbg"])
def test_distributions_bit_identical(impl):
    names = list(DISTRIBUTIONS) if impl == "threefry2x32" else list(RBG_NAMES)

    # XLA:CPU compile time of the samplers dominates this test (about a minute for all of
    # them on each platform), so the rbg keys draw the subset above.
    def all_of_them(seed):
        key = jax.random.key(seed, impl=impl)
        keys = jax.random.split(key, len(names))
        return {name: DISTRIBUTIONS[name](k) for name, k in zip(names, keys, strict=True)}

    got = jax.jit(all_of_them)(jax.device_put(np.uint32(7), IPU))
    want = jax.jit(all_of_them)(jax.device_put(np.uint32(7), CPU))
    assert sorted(got) == sorted(names)
    for name in names:
        g, w = np.asarray(got[name]), np.asarray(want[name])
        assert g.dtype == w.dtype, name
        np.testing.assert_array_equal(g.view(np.uint8), w.view(np.uint8), err_msg=name)


@pytest.mark.parametrize("name", sorted(LINALG_DISTRIBUTIONS))
def test_linalg_distributions_match_to_rounding(name):
    sample = LINALG_DISTRIBUTIONS[name]
    got, want = _draw(IPU, "threefry2x32", sample), _draw(CPU, "threefry2x32", sample)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_default_key_eager_ops_on_ipu():
    key = jax.device_put(jax.random.key(0), IPU)
    got = jax.random.normal(key, (3,))
    assert got.devices() == {IPU}
    np.testing.assert_array_equal(np.asarray(got),
                                  np.asarray(jax.random.normal(jax.random.key(0), (3,))))
