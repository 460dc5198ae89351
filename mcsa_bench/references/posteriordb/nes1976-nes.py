"""posteriordb's ``nes1976-nes``: party identification on ideology, race, age group, education, gender and
income in the 1976 National Election Study, 1,184 respondents (Gelman & Hill, ch. 4; nes1976-nes.stan).

    partyid7 ~ N(beta_1 + beta_2 real_ideo + beta_3 race_adj + beta_4 [age 30-44] + beta_5 [age 45-64]
                 + beta_6 [age 65+] + beta_7 educ1 + beta_8 gender + beta_9 income, sigma)

The age groups are indicators of age_discrete = 2, 3, 4. No prior is stated: beta (9) and sigma > 0 have
Stan's implicit flat priors, written as improper flat sites. posteriordb's data also hold ``year``, which
the Stan program does not read.
"""

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints


def model(N, partyid7, real_ideo, race_adj, educ1, gender, income, age_discrete, year=None):
    beta = numpyro.sample("beta", dist.ImproperUniform(constraints.real, (), (9,)))
    sigma = numpyro.sample("sigma", dist.ImproperUniform(constraints.positive, (), ()))
    age = jnp.asarray(age_discrete)[:, None] == jnp.array([2, 3, 4])  # 30-44, 45-64, 65 and over
    predictors = jnp.column_stack([real_ideo, race_adj, age, educ1, gender, income])
    numpyro.sample("partyid7", dist.Normal(beta[0] + predictors @ beta[1:], sigma).to_event(1),
                   obs=jnp.asarray(partyid7))
