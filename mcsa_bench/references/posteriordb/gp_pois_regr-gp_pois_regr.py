"""posteriordb's ``gp_pois_regr-gp_pois_regr``: a Gaussian process Poisson regression of 11 counts
(gp_pois_regr-gp_pois_regr.stan), the GP whitened:

    rho ~ Gamma(25, rate 4), alpha ~ N⁺(0, 2), f_tilde ~ N(0, I_N)
    f = L f_tilde, L L' = alpha² exp(-(x_i - x_j)² / (2 rho²)) + 1e-10 I;  k ~ Poisson(exp f)

posteriordb's draws are of rho, alpha and the transformed parameter f (a deterministic site here);
``latents`` recovers f_tilde = L⁻¹ f from them.
posteriordb's data also hold ``y``, which the Stan program does not read.
"""

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist


def gp_cholesky(x, rho, alpha, N):
    cov = alpha**2 * jnp.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / rho**2) + 1e-10 * jnp.eye(N)
    return jnp.linalg.cholesky(cov)


def model(N, x, k, y=None):
    x = jnp.asarray(x)
    rho = numpyro.sample("rho", dist.Gamma(25.0, 4.0))
    alpha = numpyro.sample("alpha", dist.HalfNormal(2.0))
    f_tilde = numpyro.sample("f_tilde", dist.Normal(0.0, 1.0).expand([N]).to_event(1))
    f = numpyro.deterministic("f", gp_cholesky(x, rho, alpha, N) @ f_tilde)
    numpyro.sample("k", dist.Poisson(jnp.exp(f)).to_event(1), obs=jnp.asarray(k))


def latents(published, N, x, k, y=None):
    """The latent sites from posteriordb's draws (n, ...) of rho, alpha and f: f_tilde = L⁻¹ f per draw."""
    import jax
    from jax.scipy.linalg import solve_triangular

    def whiten(rho, alpha, f):
        return solve_triangular(gp_cholesky(jnp.asarray(x), rho, alpha, N), f, lower=True)

    rho, alpha, f = (jnp.asarray(published[site]) for site in ("rho", "alpha", "f"))
    return {"rho": rho, "alpha": alpha, "f_tilde": jax.vmap(whiten)(rho, alpha, f)}
