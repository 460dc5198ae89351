"""posteriordb's ``kidiq-kidscore_interaction``: a child's test score on the mother's high-school completion,
IQ and their interaction, 434 children (Gelman & Hill, ch. 3; kidiq-kidscore_interaction.stan).

    sigma ~ Cauchy⁺(0, 2.5);  kid_score ~ N(beta_1 + beta_2 mom_hs + beta_3 mom_iq + beta_4 mom_hs mom_iq, sigma)

beta (4) has Stan's implicit flat prior. posteriordb's data also hold ``mom_hs_new`` and ``mom_iq_new``,
which the Stan program does not read.
"""

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints


def model(N, kid_score, mom_hs, mom_iq, mom_hs_new=None, mom_iq_new=None):
    beta = numpyro.sample("beta", dist.ImproperUniform(constraints.real, (), (4,)))
    sigma = numpyro.sample("sigma", dist.HalfCauchy(2.5))
    mean = beta[0] + beta[1] * mom_hs + beta[2] * mom_iq + beta[3] * mom_hs * mom_iq
    numpyro.sample("kid_score", dist.Normal(mean, sigma).to_event(1), obs=jnp.asarray(kid_score))
