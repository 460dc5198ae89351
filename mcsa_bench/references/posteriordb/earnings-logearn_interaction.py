"""posteriordb's ``earnings-logearn_interaction``: log earnings on height, sex and their interaction, 1,192
people (Gelman & Hill, ch. 4; earnings-logearn_interaction.stan).

    log earn ~ N(beta_1 + beta_2 height + beta_3 male + beta_4 height male, sigma)

No prior is stated: beta (4) and sigma > 0 have Stan's implicit flat priors, written as improper flat sites.
"""

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints


def model(N, earn, height, male):
    beta = numpyro.sample("beta", dist.ImproperUniform(constraints.real, (), (4,)))
    sigma = numpyro.sample("sigma", dist.ImproperUniform(constraints.positive, (), ()))
    mean = beta[0] + beta[1] * height + beta[2] * male + beta[3] * height * male
    numpyro.sample("log_earn", dist.Normal(mean, sigma).to_event(1), obs=jnp.log(earn))
