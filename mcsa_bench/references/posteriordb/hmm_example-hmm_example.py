"""posteriordb's ``hmm_example-hmm_example``: a two-state hidden Markov model of 100 observations with unit
Gaussian emissions, the states summed out by the forward algorithm (hmm_example-hmm_example.stan).

    theta1, theta2: the transition probabilities out of each state (simplexes, implicit flat priors)
    mu: positive_ordered[2] (implicit flat prior) plus mu_1 ~ N(3, 1), mu_2 ~ N(10, 1)
    y_t | state k ~ N(mu_k, 1)

The program is written for K = 2 (theta1, theta2, the priors of mu_1 and mu_2); its generated quantities
(the Viterbi path) are not part of the posterior.
"""

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import logsumexp
from numpyro.distributions import constraints


def model(N, K, y):
    if K != 2:
        raise ValueError(f"the program has two states (K = 2), not K = {K}")
    theta1 = numpyro.sample("theta1", dist.ImproperUniform(constraints.simplex, (), (K,)))
    theta2 = numpyro.sample("theta2", dist.ImproperUniform(constraints.simplex, (), (K,)))
    mu = numpyro.sample("mu", dist.ImproperUniform(constraints.positive_ordered_vector, (), (K,)))
    numpyro.factor("mu_prior", dist.Normal(3.0, 1.0).log_prob(mu[0]) + dist.Normal(10.0, 1.0).log_prob(mu[1]))

    log_transition = jnp.log(jnp.stack([theta1, theta2]))  # [from j, to k]
    log_emission = dist.Normal(mu, 1.0).log_prob(jnp.asarray(y)[:, None])  # [t, k]

    def forward(log_alpha, emission):
        return logsumexp(log_alpha[:, None] + log_transition, axis=0) + emission, None

    log_alpha, _ = jax.lax.scan(forward, log_emission[0], log_emission[1:])
    numpyro.factor("y", logsumexp(log_alpha))
