"""Eight schools, non-centred, in PyMC (as the extras' `eight_schools`: the tests compare the two)."""

import numpy as np
import pymc as pm


def model(J, y, sigma):
    with pm.Model() as eight_schools:
        mu = pm.Normal("mu", 0, 5)
        tau = pm.HalfCauchy("tau", 5)
        eta = pm.Normal("eta", 0, 1, shape=J)
        pm.Normal("y", mu + tau * eta, np.asarray(sigma, dtype=float), observed=np.asarray(y, dtype=float))
    return eight_schools


def not_a_model(J, y, sigma):
    return {"mu": 0.0}
