"""Eight schools, non-centred, in NumPyro (as the extras' `eight_schools`: the tests compare the two)."""

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist


def model(J, y, sigma):
    mu = numpyro.sample("mu", dist.Normal(0, 5))
    tau = numpyro.sample("tau", dist.HalfCauchy(5))
    with numpyro.plate("J", J):
        eta = numpyro.sample("eta", dist.Normal(0, 1))
        numpyro.sample("y", dist.Normal(mu + tau * eta, jnp.asarray(sigma)), obs=jnp.asarray(y))


def no_latents(J, y, sigma):
    numpyro.sample("y", dist.Normal(0.0, 1.0), obs=jnp.asarray(y))


def discrete(J, y, sigma):
    numpyro.sample("school", dist.Categorical(jnp.ones(J) / J))
    mu = numpyro.sample("mu", dist.Normal(0, 5))
    numpyro.sample("y", dist.Normal(mu, jnp.asarray(sigma)), obs=jnp.asarray(y))


def zero_where_q_starts(J, y, sigma):
    """A density that is zero for μ ≤ 1: not finite at z = 0, where q starts."""
    mu = numpyro.sample("mu", dist.Normal(0, 5))
    numpyro.factor("wall", jnp.where(mu > 1.0, 0.0, -jnp.inf))
    numpyro.sample("y", dist.Normal(mu, jnp.asarray(sigma)), obs=jnp.asarray(y))
