"""posteriordb's ``low_dim_gauss_mix-low_dim_gauss_mix``: a two-component Gaussian mixture of 1,000
observations, its means ordered (low_dim_gauss_mix-low_dim_gauss_mix.stan).

    mu: ordered[2], mu ~ N(0, 2) (each, on the ordered cone);  sigma_k ~ N⁺(0, 2);  theta ~ Beta(5, 5)
    y_n ~ theta N(mu_1, sigma_1) + (1 - theta) N(mu_2, sigma_2)

The normal prior of the ordered mu is Stan's ``~`` on a constrained parameter: its density restricted to
the cone, unnormalized, so mu is an improper flat site on the cone plus a factor.
"""

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints


def model(N, y):
    mu = numpyro.sample("mu", dist.ImproperUniform(constraints.ordered_vector, (), (2,)))
    numpyro.factor("mu_prior", jnp.sum(dist.Normal(0.0, 2.0).log_prob(mu)))
    sigma = numpyro.sample("sigma", dist.HalfNormal(2.0).expand([2]).to_event(1))
    theta = numpyro.sample("theta", dist.Beta(5.0, 5.0))
    mixture = dist.MixtureSameFamily(dist.Categorical(probs=jnp.stack([theta, 1.0 - theta])), dist.Normal(mu, sigma))
    numpyro.sample("y", mixture.expand([N]).to_event(1), obs=jnp.asarray(y))
