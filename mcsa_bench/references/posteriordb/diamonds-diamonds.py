"""posteriordb's ``diamonds-diamonds``: brms's linear regression of log price on 24 centred predictors of
5,000 diamonds (diamonds-diamonds.stan).

    b ~ N(0, 1) (24), Intercept ~ t_3(8, 10), sigma ~ t_3⁺(0, 10) (the t truncated at 0: a half-t)
    Y ~ N(Intercept + Xc b, sigma), Xc: X without its first (intercept) column, each column centred

Known to be hard for NUTS: the predictors are strongly correlated, so is b's posterior. ``prior_only``
leaves the likelihood out, as in the program; its generated quantity ``b_Intercept`` is not part of the
posterior and is left out.
"""

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist


def model(N, Y, K, X, prior_only):
    X = jnp.asarray(X)
    centred = X[:, 1:] - X[:, 1:].mean(axis=0)
    b = numpyro.sample("b", dist.Normal(0.0, 1.0).expand([K - 1]).to_event(1))
    intercept = numpyro.sample("Intercept", dist.StudentT(3.0, 8.0, 10.0))
    sigma = numpyro.sample("sigma", dist.FoldedDistribution(dist.StudentT(3.0, 0.0, 10.0)))
    if not prior_only:
        numpyro.sample("Y", dist.Normal(intercept + centred @ b, sigma).to_event(1), obs=jnp.asarray(Y))
