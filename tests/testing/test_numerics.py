"""The finite differences and z-scores the checks stand on (mcsa_bench.testing.numerics), against
closed-form derivatives and hand-computed z-scores."""

import numpy as np
import pytest

from mcsa_bench.testing.numerics import (
    assert_gradient_matches,
    central_differences,
    directional_derivative,
    worst,
    z_scores,
)

X = np.random.default_rng(0).standard_normal((4, 3))


def cubic(x):
    return np.sum(x**3, axis=1)


def test_central_differences_match_the_closed_form_gradient():
    """∂/∂x Σ x³ = 3x²; the central difference's error is step² f'''/6 = 1e-10."""
    np.testing.assert_allclose(central_differences(cubic, X), 3 * X**2, rtol=0, atol=1e-9)


def test_the_fourth_order_directional_derivative_matches_the_closed_form():
    """d/dt Σ sin(x + t v) at 0 = Σ cos(x) v; truncation O(step⁴) = 1e-16, rounding ~ 1e-12."""
    direction = np.random.default_rng(1).standard_normal(X.shape)
    exact = np.sum(np.cos(X) * direction, axis=1)
    np.testing.assert_allclose(directional_derivative(lambda x: np.sum(np.sin(x), axis=1), X, direction), exact,
                               rtol=0, atol=1e-10)


@pytest.mark.parametrize("n_directions", [None, 5])
def test_the_gradient_check_passes_the_true_gradient_and_fails_one_off_by_one_percent(n_directions):
    assert_gradient_matches(lambda x: (cubic(x), 3 * x**2), X, n_directions=n_directions)
    with pytest.raises(AssertionError):
        assert_gradient_matches(lambda x: (cubic(x), 3.03 * x**2), X, n_directions=n_directions)


def test_z_scores_are_the_standardized_mean_error_and_exact_without_spread():
    """Columns: mean 2, sd √2 (ddof 1) over 2 draws, so a standard error of 1 and z = (2 − 1)/1; a column
    with no spread gives 0 where it matches and infinity where it does not."""
    samples = np.array([[1.0, 5.0, 5.0], [3.0, 5.0, 5.0]])
    np.testing.assert_array_equal(z_scores(samples, np.array([1.0, 5.0, 4.0])), [1.0, 0.0, np.inf])


def test_worst_is_the_largest_magnitude_and_nan_counts_as_the_largest():
    assert worst([1.0, -5.0, 2.0]) == 1
    assert worst([1.0, -5.0, np.nan]) == 2
