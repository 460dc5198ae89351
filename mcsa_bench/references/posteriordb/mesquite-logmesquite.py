"""posteriordb's ``mesquite-logmesquite``: log weight of 46 mesquite bushes on the logs of their dimensions,
density and group (Gelman & Hill, ch. 4; mesquite-logmesquite.stan).

    log weight ~ N(beta_1 + beta_2 log diam1 + beta_3 log diam2 + beta_4 log canopy_height
                   + beta_5 log total_height + beta_6 log density + beta_7 group, sigma)

No prior is stated: beta (7) and sigma > 0 have Stan's implicit flat priors, written as improper flat sites.
"""

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints


def model(N, weight, diam1, diam2, canopy_height, total_height, density, group):
    beta = numpyro.sample("beta", dist.ImproperUniform(constraints.real, (), (7,)))
    sigma = numpyro.sample("sigma", dist.ImproperUniform(constraints.positive, (), ()))
    predictors = jnp.log(jnp.stack([diam1, diam2, canopy_height, total_height, density], axis=1))
    mean = beta[0] + predictors @ beta[1:6] + beta[6] * group
    numpyro.sample("log_weight", dist.Normal(mean, sigma).to_event(1), obs=jnp.log(weight))
