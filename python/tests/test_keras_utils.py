"""keras.utils' array helpers against values worked out by hand (Keras 3's
documented examples among them: keras/src/utils/numerical_utils.py and
sequence_utils.py), and their refusals."""

import numpy as np
import pytest

import autoshard.keras as keras
from autoshard.keras.preprocessing.sequence import pad_sequences as pad_from_preprocessing


def test_to_categorical_one_hot_rows():
    got = keras.utils.to_categorical([0, 2, 1, 2], num_classes=4)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, [[1, 0, 0, 0], [0, 0, 1, 0], [0, 1, 0, 0], [0, 0, 1, 0]])


def test_to_categorical_infers_classes_and_drops_a_last_axis_of_one():
    got = keras.utils.to_categorical(np.array([[1], [0], [2]], dtype=np.uint8))
    assert got.shape == (3, 3)
    np.testing.assert_array_equal(got.argmax(-1), [1, 0, 2])
    grid = keras.utils.to_categorical(np.array([[0, 1], [1, 1]]), 2)
    assert grid.shape == (2, 2, 2) and grid[0, 0, 0] == 1 and grid[1, 0, 1] == 1
    np.testing.assert_array_equal(keras.utils.to_categorical([1.9, 0.2]), [[0, 1], [1, 0]])


@pytest.mark.parametrize("ids, classes, message", [
    ([0, 3], 3, "class id 3 is outside [0, 3)"),
    ([-1, 0], 2, "class id -1 is outside [0, 2)"),
    ([0.0, np.nan], None, "NaN or infinity"),
])
def test_to_categorical_refuses_ids_it_cannot_place(ids, classes, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        keras.utils.to_categorical(ids, classes)


def test_normalize_divides_by_the_norm_and_leaves_zero_rows():
    x = np.array([[3.0, 4.0], [0.0, 0.0]])
    np.testing.assert_allclose(keras.utils.normalize(x), [[0.6, 0.8], [0.0, 0.0]])
    np.testing.assert_allclose(keras.utils.normalize(x, axis=0, order=1), [[1.0, 1.0], [0.0, 0.0]])
    with pytest.raises(ValueError, match="order must be an int >= 1"):
        keras.utils.normalize(x, order=0)


def test_pad_sequences_as_keras_documents():
    seqs = [[1], [2, 3], [4, 5, 6]]
    got = keras.utils.pad_sequences(seqs)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, [[0, 0, 1], [0, 2, 3], [4, 5, 6]])
    np.testing.assert_array_equal(keras.utils.pad_sequences(seqs, value=-1),
                                  [[-1, -1, 1], [-1, 2, 3], [4, 5, 6]])
    np.testing.assert_array_equal(keras.utils.pad_sequences(seqs, padding="post"),
                                  [[1, 0, 0], [2, 3, 0], [4, 5, 6]])
    np.testing.assert_array_equal(keras.utils.pad_sequences(seqs, maxlen=2), [[0, 1], [2, 3], [5, 6]])
    np.testing.assert_array_equal(pad_from_preprocessing(seqs, maxlen=2, truncating="post"),
                                  [[0, 1], [2, 3], [4, 5]])


def test_pad_sequences_edges():
    assert keras.utils.pad_sequences([]).shape == (0, 0)
    np.testing.assert_array_equal(keras.utils.pad_sequences([[], [7]]), [[0], [7]])
    assert keras.utils.pad_sequences([[1, 2]], maxlen=0).shape == (1, 0)
    vectors = keras.utils.pad_sequences([np.ones((1, 3)), np.ones((2, 3))], dtype="float32")
    assert vectors.shape == (2, 2, 3) and vectors[0, 0].sum() == 0 and vectors[0, 1].sum() == 3


@pytest.mark.parametrize("kwargs, message", [
    ({"padding": "middle"}, "padding must be 'pre' or 'post'"),
    ({"truncating": "both"}, "truncating must be 'pre' or 'post'"),
    ({"maxlen": -1}, "maxlen must be an integer"),
])
def test_pad_sequences_refusals(kwargs, message):
    with pytest.raises(ValueError, match=message):
        keras.utils.pad_sequences([[1, 2]], **kwargs)


def test_pad_sequences_refuses_items_of_other_shapes_and_non_sequences():
    with pytest.raises(ValueError, match="sequence 1 have shape"):
        keras.utils.pad_sequences([np.ones((1, 3)), np.ones((1, 2))], dtype="float32")
    with pytest.raises(ValueError, match="sequence 0 is not a sequence"):
        keras.utils.pad_sequences([5])
