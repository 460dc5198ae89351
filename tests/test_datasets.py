"""The dataset registry and loader: shipped names, user CSV paths with the documented conventions,
one-hot encoding, the seeded split and standardization with training statistics."""

import numpy as np
import pytest

from mcsa_bench.api import ConfigurationError
from mcsa_bench.datasets import available_datasets, load_columns, load_supervised, train_test_split
from tests.support import CSV_CASES, assert_standardized, write_file

SHIPPED = {"boston", "breast", "concrete", "german", "german_numeric", "heart", "ionosphere", "pima", "radon", "sonar",
           "sp500"}


def test_every_shipped_dataset_is_available_and_readable():
    assert set(available_datasets()) == SHIPPED
    assert load_columns("pima")["y"].shape == (768,)
    assert load_columns("sp500")["date"].dtype.kind == "U"


def test_german_numeric_is_the_24_column_coding_of_the_same_records_as_german():
    numeric, coded = load_columns("german_numeric"), load_columns("german")
    assert len(numeric) == 25 and all(values.dtype.kind == "f" for values in numeric.values())
    # duration (a02 in both), age (a10 numeric, a13 categorical file) and the label agree record for record
    assert sorted(zip(numeric["a02"], numeric["a10"], numeric["y"])) == sorted(
        zip(coded["a02"], coded["a13"], coded["y"])
    )
    data = load_supervised("german_numeric", task="classification", test_fraction=0.1, split_seed=0)
    assert data.num_features == 24 and data.x_train.shape == (900, 24)


def test_unknown_names_and_missing_files_are_clear_errors(tmp_path):
    with pytest.raises(ConfigurationError,
                       match=r"unknown dataset 'pimaa' \(did you mean 'pima'\?\); available: boston, breast"):
        load_columns("pimaa")
    with pytest.raises(ConfigurationError, match="does not exist"):
        load_columns(str(tmp_path / "missing.csv"))


def test_a_user_csv_follows_the_conventions(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text("size,colour,label\n1.0,red,0\n2.0,blue,1\n3.0,green,0\n4.0,blue,1\n5.0,red,1\n")
    data = load_supervised(str(path), task="classification", test_fraction=0.0, split_seed=0)
    # target: the last column (no 'y'); 'colour' one-hot with its first sorted level (blue) dropped
    assert data.feature_names == ["size", "colour=green", "colour=red"]
    np.testing.assert_array_equal(data.y_train, [0, 1, 0, 1, 1])
    raw = load_supervised(str(path), task="classification", test_fraction=0.0, split_seed=0, standardize_features=False)
    np.testing.assert_array_equal(raw.x_train[:, 0], [1, 2, 3, 4, 5])
    np.testing.assert_array_equal(raw.x_train[:, 2], [1, 0, 0, 0, 1])


def test_classification_needs_binary_labels_and_rows_need_equal_width(tmp_path):
    with pytest.raises(ConfigurationError, match="0/1 labels"):
        load_supervised("boston", task="classification")
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("a,y\n1,0\n2\n")
    with pytest.raises(ConfigurationError, match="every row must have 2 fields"):
        load_columns(str(ragged))


def test_a_spreadsheets_byte_order_mark_is_not_part_of_the_first_column_name(tmp_path):
    path = tmp_path / "exported.csv"
    path.write_text("a,y\n1,0\n2,1\n", encoding="utf-8-sig")
    assert list(load_columns(str(path))) == ["a", "y"]


def test_split_is_seeded_disjoint_and_complete():
    train, test = train_test_split(100, 0.1, seed=3)
    again, _ = train_test_split(100, 0.1, seed=3)
    other, _ = train_test_split(100, 0.1, seed=4)
    assert len(test) == 10 and np.intersect1d(train, test).size == 0
    assert np.array_equal(np.union1d(train, test), np.arange(100))
    assert np.array_equal(train, again) and not np.array_equal(train, other)
    with pytest.raises(ConfigurationError, match=r"\[0, 1\)"):
        train_test_split(100, 1.0, seed=0)


def test_regression_standardizes_features_and_target_with_training_statistics():
    data = load_supervised("boston", task="regression", test_fraction=0.1, split_seed=1)
    raw = load_columns("boston")["medv"]
    np.testing.assert_allclose(data.y_scale.mean, raw[data.train_index].mean())
    np.testing.assert_allclose(data.y_scale.std, raw[data.train_index].std(ddof=0))
    raw_x = load_supervised("boston", task="regression", test_fraction=0.1, split_seed=1, standardize_features=False)
    assert_standardized(data.x_train, raw_x.x_train)  # the atol 1e-12 it replaces is below boston's bound (1.1e-12)
    np.testing.assert_allclose(data.y_test * data.y_scale.std + data.y_scale.mean, raw[data.test_index])


def test_max_rows_keeps_a_seeded_subset_drawn_before_the_split():
    full = load_supervised("breast", task="classification", test_fraction=0.1, split_seed=4)
    small = load_supervised("breast", task="classification", test_fraction=0.1, split_seed=4, max_rows=60)
    again = load_supervised("breast", task="classification", test_fraction=0.1, split_seed=4, max_rows=60)
    other = load_supervised("breast", task="classification", test_fraction=0.1, split_seed=5, max_rows=60)
    assert (small.x_train.shape[0], small.x_test.shape[0]) == (54, 6)
    assert np.array_equal(small.train_index, again.train_index) and not np.array_equal(
        small.train_index, other.train_index
    )
    rows = np.concatenate([small.train_index, small.test_index])
    assert len(set(rows.tolist())) == 60 and rows.max() < 569  # indices are rows of the file
    raw = load_columns("breast")["y"]
    np.testing.assert_array_equal(small.y_train, raw[small.train_index])
    assert full.x_train.shape[0] == 512
    with pytest.raises(ConfigurationError, match="max_rows must be null .* or an integer >= 4, got 2"):
        load_supervised("breast", task="classification", max_rows=2)


def test_every_bad_data_case_is_also_caught_by_the_loader(tmp_path):
    """The bad data sets tests/test_cli_errors.py gives the CLI, given to the loader directly."""
    for name, (content, words) in CSV_CASES.items():
        path = tmp_path / f"{name}.csv"
        write_file(path, content)
        with pytest.raises(ConfigurationError) as caught:
            load_supervised(str(path), task="classification")
        assert all(word in str(caught.value) for word in words) and str(path) in str(caught.value), name
