"""posteriordb's ``sblrc-blr``: a Bayesian linear regression of 100 observations on 5 predictors
(sblrc-blr.stan).

    beta ~ N(0, 10) (5), sigma ~ N⁺(0, 10);  y ~ N(X beta, sigma)
"""

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist


def model(N, D, X, y):
    beta = numpyro.sample("beta", dist.Normal(0.0, 10.0).expand([D]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(10.0))
    numpyro.sample("y", dist.Normal(jnp.asarray(X) @ beta, sigma).to_event(1), obs=jnp.asarray(y))
