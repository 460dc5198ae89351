"""The log densities of the shipped published posteriors written out a second time, from their Stan programs
(posteriordb) and the Gym's model code, with scipy.stats and plain loops as the programs state them: the
independent side of tests/references/test_external.py's density check. Each takes the data (as the model's
keyword arguments) and the constrained parameters by site, and returns the log density up to a constant
(flat priors contribute nothing)."""

from __future__ import annotations

import numpy as np
from scipy import linalg, special, stats


def arma(data, p):
    y = data["y"]
    lp = (stats.norm.logpdf(p["mu"], 0, 10) + stats.norm.logpdf(p["phi"], 0, 2) + stats.norm.logpdf(p["theta"], 0, 2)
          + stats.cauchy.logpdf(p["sigma"], 0, 2.5))
    err = np.empty(data["T"])
    err[0] = y[0] - (p["mu"] + p["phi"] * p["mu"])
    for t in range(1, data["T"]):
        err[t] = y[t] - (p["mu"] + p["phi"] * y[t - 1] + p["theta"] * err[t - 1])
    return lp + stats.norm.logpdf(err, 0, p["sigma"]).sum()


def diamonds(data, p):
    x = data["X"]
    centred = x[:, 1:] - x[:, 1:].mean(axis=0)
    lp = (stats.norm.logpdf(p["b"], 0, 1).sum() + stats.t.logpdf(p["Intercept"], 3, 8, 10)
          + stats.t.logpdf(p["sigma"], 3, 0, 10))
    return lp + stats.norm.logpdf(data["Y"], p["Intercept"] + centred @ p["b"], p["sigma"]).sum()


def earnings(data, p):
    b, height, male = p["beta"], data["height"], data["male"]
    mean = b[0] + b[1] * height + b[2] * male + b[3] * height * male
    return stats.norm.logpdf(np.log(data["earn"]), mean, p["sigma"]).sum()


def gp_cholesky(x, alpha, rho):
    x = np.asarray(x, dtype=float)
    cov = alpha**2 * np.exp(-((x[:, None] - x[None, :]) ** 2) / (2 * rho**2)) + 1e-10 * np.eye(x.size)
    return linalg.cholesky(cov, lower=True)


def gp_pois_regr(data, p):
    f = gp_cholesky(data["x"], p["alpha"], p["rho"]) @ p["f_tilde"]
    lp = (stats.gamma.logpdf(p["rho"], 25, scale=1 / 4) + stats.norm.logpdf(p["alpha"], 0, 2)
          + stats.norm.logpdf(p["f_tilde"]).sum())
    return lp + stats.poisson.logpmf(data["k"], np.exp(f)).sum()


def hmm_example(data, p):
    y, mu, theta = data["y"], p["mu"], np.stack([p["theta1"], p["theta2"]])
    gamma = np.array([stats.norm.logpdf(y[0], mu[k], 1) for k in range(2)])
    for t in range(1, data["N"]):
        gamma = np.array([special.logsumexp([gamma[j] + np.log(theta[j, k]) + stats.norm.logpdf(y[t], mu[k], 1)
                                             for j in range(2)]) for k in range(2)])
    return stats.norm.logpdf(mu[0], 3, 1) + stats.norm.logpdf(mu[1], 10, 1) + special.logsumexp(gamma)


def kidiq(data, p):
    b, hs, iq = p["beta"], data["mom_hs"], data["mom_iq"]
    mean = b[0] + b[1] * hs + b[2] * iq + b[3] * hs * iq
    return stats.cauchy.logpdf(p["sigma"], 0, 2.5) + stats.norm.logpdf(data["kid_score"], mean, p["sigma"]).sum()


def kilpisjarvi(data, p):
    lp = stats.norm.logpdf(p["alpha"], data["pmualpha"], data["psalpha"]) + stats.norm.logpdf(
        p["beta"], data["pmubeta"], data["psbeta"])
    return lp + stats.norm.logpdf(data["y"], p["alpha"] + p["beta"] * data["x"], p["sigma"]).sum()


def low_dim_gauss_mix(data, p):
    mu, sigma, theta, y = p["mu"], p["sigma"], p["theta"], data["y"]
    lp = stats.norm.logpdf(sigma, 0, 2).sum() + stats.norm.logpdf(mu, 0, 2).sum() + stats.beta.logpdf(theta, 5, 5)
    return lp + np.logaddexp(np.log(theta) + stats.norm.logpdf(y, mu[0], sigma[0]),
                             np.log1p(-theta) + stats.norm.logpdf(y, mu[1], sigma[1])).sum()


def mesquite(data, p):
    b, log = p["beta"], {key: np.log(value) for key, value in data.items() if key != "N" and key != "group"}
    mean = (b[0] + b[1] * log["diam1"] + b[2] * log["diam2"] + b[3] * log["canopy_height"]
            + b[4] * log["total_height"] + b[5] * log["density"] + b[6] * data["group"])
    return stats.norm.logpdf(log["weight"], mean, p["sigma"]).sum()


def nes(data, p):
    b, age = p["beta"], data["age_discrete"]
    mean = (b[0] + b[1] * data["real_ideo"] + b[2] * data["race_adj"] + b[3] * (age == 2) + b[4] * (age == 3)
            + b[5] * (age == 4) + b[6] * data["educ1"] + b[7] * data["gender"] + b[8] * data["income"])
    return stats.norm.logpdf(data["partyid7"], mean, p["sigma"]).sum()


def sblrc(data, p):
    lp = stats.norm.logpdf(p["beta"], 0, 10).sum() + stats.norm.logpdf(p["sigma"], 0, 10)
    return lp + stats.norm.logpdf(data["y"], data["X"] @ p["beta"], p["sigma"]).sum()


def stochastic_volatility(data, p):
    phi, mean, scale, h = (p["persistence_of_volatility"], p["mean_log_volatility"], p["white_noise_shock_scale"],
                           p["log_volatility"])
    lp = (stats.beta.logpdf((phi + 1) / 2, 20, 1.5) + stats.cauchy.logpdf(mean, 0, 5)
          + stats.cauchy.logpdf(scale, 0, 2) + stats.norm.logpdf(h[0], mean, scale / np.sqrt(1 - phi**2)))
    for t in range(1, h.size):
        lp += stats.norm.logpdf(h[t], mean + phi * (h[t - 1] - mean), scale)
    return lp + stats.norm.logpdf(data["centered_returns"], 0, np.exp(h / 2)).sum()


def item_response_theory(data, p):
    logits = (p["mean_student_ability"] + p["centered_student_ability"][data["student_ids"]]
              - p["question_difficulty"][data["question_ids"]])
    lp = (stats.norm.logpdf(p["mean_student_ability"], 0.75, 1) + stats.norm.logpdf(p["centered_student_ability"]).sum()
          + stats.norm.logpdf(p["question_difficulty"]).sum())
    return lp + stats.bernoulli.logpmf(data["correct"], special.expit(logits)).sum()


#: the shipped posterior -> its log density written out
DENSITIES = {
    "arma-arma11": arma, "diamonds-diamonds": diamonds, "earnings-logearn_interaction": earnings,
    "gp_pois_regr-gp_pois_regr": gp_pois_regr, "hmm_example-hmm_example": hmm_example,
    "kidiq-kidscore_interaction": kidiq, "kilpisjarvi_mod-kilpisjarvi": kilpisjarvi,
    "low_dim_gauss_mix-low_dim_gauss_mix": low_dim_gauss_mix, "mesquite-logmesquite": mesquite, "nes1976-nes": nes,
    "sblrc-blr": sblrc, "stochastic_volatility_sp500_small": stochastic_volatility,
    "synthetic_item_response_theory": item_response_theory,
}
