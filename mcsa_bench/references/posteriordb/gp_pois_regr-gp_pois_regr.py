"""posteriordb's ``gp_pois_regr-gp_pois_regr``: a Gaussian process Poisson regression of 11 counts
(gp_pois_regr-gp_pois_regr.stan), the GP whitened:

    rho ~ Gamma(25, rate 4), alpha ~ N⁺(0, 2), f_tilde ~ N(0, I_N)
    f = L f_tilde, L L' = alpha² exp(-(x_i - x_j)² / (2 rho²)) + 1e-10 I;  k ~ Poisson(exp f)

posteriordb's draws are of rho, alpha and the transformed parameter f (a deterministic site here).
posteriordb's data also hold ``y``, which the Stan program does not read.
"""

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist


def model(N, x, k, y=None):
    x = jnp.asarray(x)
    rho = numpyro.sample("rho", dist.Gamma(25.0, 4.0))
    alpha = numpyro.sample("alpha", dist.HalfNormal(2.0))
    f_tilde = numpyro.sample("f_tilde", dist.Normal(0.0, 1.0).expand([N]).to_event(1))
    cov = alpha**2 * jnp.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / rho**2) + 1e-10 * jnp.eye(N)
    f = numpyro.deterministic("f", jnp.linalg.cholesky(cov) @ f_tilde)
    numpyro.sample("k", dist.Poisson(jnp.exp(f)).to_event(1), obs=jnp.asarray(k))
