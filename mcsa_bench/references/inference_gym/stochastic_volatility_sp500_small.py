"""Inference Gym's ``stochastic_volatility_sp500_small`` (targets/stochastic_volatility.py,
``StochasticVolatilitySP500Small``): the log volatility of the last 100 daily changes of the S&P 500
closing price (index points, mean removed) as a stationary AR(1) process, in the Gym's centred form.

    persistence_of_volatility = 2 B - 1, B ~ Beta(20, 1.5);  mean_log_volatility ~ Cauchy(0, 5)
    white_noise_shock_scale ~ Cauchy⁺(0, 2)
    log_volatility_1 ~ N(mean, scale / sqrt(1 - persistence²))
    log_volatility_t ~ N(mean + persistence (log_volatility_{t-1} - mean), scale)
    centered_returns_t ~ N(0, exp(log_volatility_t / 2))

103 latents. The affine map of the Beta is given its domain, so that the site's support is (-1, 1) (else
NumPyro takes it as the real line). The AR(1) prior of the whole series is one improper flat site plus a
factor holding the process's log density, so that ``log_volatility`` is one site, as in the Gym.
"""

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints, transforms


def model(centered_returns):
    returns = jnp.asarray(centered_returns)
    persistence = numpyro.sample("persistence_of_volatility", dist.TransformedDistribution(
        dist.Beta(20.0, 1.5), transforms.AffineTransform(-1.0, 2.0, domain=constraints.unit_interval)))
    mean = numpyro.sample("mean_log_volatility", dist.Cauchy(0.0, 5.0))
    scale = numpyro.sample("white_noise_shock_scale", dist.HalfCauchy(2.0))
    log_volatility = numpyro.sample(
        "log_volatility", dist.ImproperUniform(constraints.real, (), returns.shape))
    first = dist.Normal(mean, scale / jnp.sqrt(1.0 - persistence**2)).log_prob(log_volatility[0])
    rest = dist.Normal(mean + persistence * (log_volatility[:-1] - mean), scale).log_prob(log_volatility[1:])
    numpyro.factor("log_volatility_prior", first + jnp.sum(rest))
    numpyro.sample("centered_returns", dist.Normal(0.0, jnp.exp(log_volatility / 2.0)).to_event(1), obs=returns)
