"""The models' work arrays (mcsa_bench.builtin.models.work): one array per name, kept while its shape
stays, reallocated when the shape changes, zero when asked."""

import numpy as np

from mcsa_bench.builtin.models.work import WorkArrays


def test_a_work_array_is_kept_per_name_and_shape_and_zero_when_asked():
    work = WorkArrays()
    first = work.get("a", (3, 2), zeros=True)
    np.testing.assert_array_equal(first, np.zeros((3, 2)))
    first[:] = 7.0
    assert work.get("a", (3, 2)) is first  # kept, contents and all: the owner overwrites it
    assert work.get("b", (3, 2)) is not first
    resized = work.get("a", (4, 2), zeros=True)
    assert resized is not first and resized.shape == (4, 2) and not resized.any()
    assert work.get("a", (4, 2)) is resized
