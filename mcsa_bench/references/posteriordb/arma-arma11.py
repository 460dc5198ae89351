"""posteriordb's ``arma-arma11``: an ARMA(1, 1) model of T = 200 observations (arma-arma11.stan).

    mu ~ N(0, 10), phi ~ N(0, 2), theta ~ N(0, 2), sigma ~ Cauchy⁺(0, 2.5)
    nu_1 = mu + phi mu (err_0 = 0);  nu_t = mu + phi y_{t-1} + theta err_{t-1};  err_t = y_t - nu_t ~ N(0, sigma)

``err ~ normal(0, sigma)`` is ``y ~ normal(nu, sigma)``: each nu_t depends on the parameters and on earlier
observations only. phi and theta are unconstrained, as in the Stan program.
"""

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist


def model(T, y):
    y = jnp.asarray(y)
    mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
    phi = numpyro.sample("phi", dist.Normal(0.0, 2.0))
    theta = numpyro.sample("theta", dist.Normal(0.0, 2.0))
    sigma = numpyro.sample("sigma", dist.HalfCauchy(2.5))

    def predict(previous_error, observations):
        previous, current = observations
        prediction = mu + phi * previous + theta * previous_error
        return current - prediction, prediction

    first = mu + phi * mu
    _, rest = jax.lax.scan(predict, y[0] - first, (y[:-1], y[1:]))
    numpyro.sample("y", dist.Normal(jnp.concatenate([jnp.atleast_1d(first), rest]), sigma).to_event(1), obs=y)
