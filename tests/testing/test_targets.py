"""The checks' Gaussian targets and proposals (mcsa_bench.testing.targets): the moments they promise."""

import numpy as np
import pytest

from mcsa_bench.testing.targets import gaussian_target, offset_proposal


@pytest.mark.parametrize("dim", [1, 2, 5, 8])
def test_the_checks_target_has_its_scales_and_correlations(dim):
    target = gaussian_target(dim)
    if dim == 1:
        np.testing.assert_allclose(target.mean, [0.5], rtol=1e-15)
        np.testing.assert_allclose(target.cov, [[1.3**2]], rtol=1e-15)
        return
    sd = np.sqrt(np.diag(target.cov))
    np.testing.assert_allclose(sd, [0.5, 1.0, 1.5, 0.8, 2.0, 1.2, 0.7, 1.1][:dim], rtol=1e-15)
    np.testing.assert_allclose(target.cov[0, 1] / (sd[0] * sd[1]), 0.5, rtol=1e-14)
    np.testing.assert_allclose(target.mean, np.linspace(-1.0, 1.0, dim), rtol=0, atol=1e-15)


def test_the_offset_proposal_is_shifted_and_wider_as_promised():
    target = gaussian_target(5)
    moments = offset_proposal(target).family.moments(offset_proposal(target).params)
    np.testing.assert_allclose(moments.mean, target.mean + 0.3 * target.std, rtol=1e-14)
    np.testing.assert_allclose(moments.sd, 1.3 * target.std, rtol=1e-12)
