"""posteriordb's ``kilpisjarvi_mod-kilpisjarvi``: a linear trend of Kilpisjärvi's summer temperatures over 62
years, with the priors the data set gives (kilpisjarvi_mod-kilpisjarvi.stan).

    alpha ~ N(pmualpha, psalpha), beta ~ N(pmubeta, psbeta);  y ~ N(alpha + beta x, sigma)

sigma > 0 has Stan's implicit flat prior. x is not centred, so alpha and beta are correlated almost
perfectly. ``xpred`` (a prediction's input) is not read by the model block.
"""

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints


def model(N, x, y, xpred, pmualpha, psalpha, pmubeta, psbeta):
    alpha = numpyro.sample("alpha", dist.Normal(pmualpha, psalpha))
    beta = numpyro.sample("beta", dist.Normal(pmubeta, psbeta))
    sigma = numpyro.sample("sigma", dist.ImproperUniform(constraints.positive, (), ()))
    numpyro.sample("y", dist.Normal(alpha + beta * jnp.asarray(x), sigma).to_event(1), obs=jnp.asarray(y))
