"""The hierarchical logistic regression of mcsa_bench/builtin/models/logistic.py in NumPyro (the tests and
benchmarks/measure/autodiff_overhead.py compare the two): σ_β, σ_α ~ N⁺(0, 1), β ~ N(0, σ_β²), α ~ N(0, σ_α²),
y ~ Bernoulli(logit⁻¹(xβ + α))."""

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist


def model(x, y):
    x, y = jnp.asarray(x, dtype=float), jnp.asarray(y)
    sigma_beta = numpyro.sample("sigma_beta", dist.HalfNormal(1.0))
    sigma_alpha = numpyro.sample("sigma_alpha", dist.HalfNormal(1.0))
    beta = numpyro.sample("beta", dist.Normal(0.0, sigma_beta).expand([x.shape[1]]).to_event(1))
    alpha = numpyro.sample("alpha", dist.Normal(0.0, sigma_alpha))
    numpyro.sample("y", dist.Bernoulli(logits=x @ beta + alpha).to_event(1), obs=y)
