"""Custom layers and Keras's masks (keras/src/layers/layer.py): a layer
that defines compute_mask (or sets supports_masking) gives its output
compute_mask(inputs, previous_mask), the input's mask by default; a call
that takes ``mask`` receives the input's; a layer that does not support
masking drops it. The proof: a padded batch predicts (and trains, sharded
too) as its sequences one by one exactly where the mask reaches the
recurrent layer, and NumPy's masked mean for a layer that reads the mask."""

import numpy as np
import pytest

import autoshard.keras as keras
from autoshard.keras import layers, ops
from autoshard.keras.distribution import AutoShard, DeviceMesh, set_distribution

VOCAB, T = 9, 6
LENGTHS = [6, 3, 1, 4]


def padded(seed=2):
    rng = np.random.default_rng(seed)
    seqs = [rng.integers(1, VOCAB, size=n).astype(np.int32) for n in LENGTHS]
    x = np.zeros((len(seqs), T), np.int32)
    for i, s in enumerate(seqs):
        x[i, :len(s)] = s
    return seqs, x


class Scale(layers.Layer):
    """x * w, passing the mask on by defining compute_mask (Keras's way)."""

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1],), initializer="random_normal", name="w")

    def call(self, x):
        return x * self.w

    def compute_mask(self, inputs, mask=None):
        return mask


class ScaleSaysSupports(Scale):
    """The same, by supports_masking = True and Keras's default compute_mask."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    compute_mask = layers.Layer.compute_mask


class ScaleWithoutMasking(Scale):
    """Neither: Keras drops the mask here."""

    compute_mask = layers.Layer.compute_mask


class MaskWhere(layers.Layer):
    """Makes a mask, as Masking does: a step whose features are all
    `value` is masked (its features kept as they are)."""

    def __init__(self, value, **kwargs):
        super().__init__(**kwargs)
        self.value = value

    def call(self, x):
        return x

    def compute_mask(self, inputs, previous_mask=None):
        return ops.greater(ops.sum(ops.abs(inputs - self.value), axis=-1), 0.0)


class MaskedMean(layers.Layer):
    """Reads the mask in call: the mean of the kept steps; no mask after it."""

    def call(self, x, mask=None):
        if mask is None:
            return ops.mean(x, axis=1)
        m = ops.expand_dims(ops.cast(mask, "float32"), -1)
        return ops.sum(x * m, axis=1) / ops.maximum(ops.sum(m, axis=1), 1.0)


def sequence_model(middle, rnn=True, seed=4):
    keras.utils.set_random_seed(seed)
    x = keras.Input((None,), dtype="int32")
    h = middle(layers.Embedding(VOCAB, 5, mask_zero=True)(x))
    h = layers.GRU(4)(h) if rnn else h
    model = keras.Model(x, layers.Dense(2)(h))
    model.compile(keras.optimizers.SGD(learning_rate=0.1), "mse")
    return model


def predicts_as_alone(model, seqs, x):
    together = model.predict(x, verbose=0)
    return all(np.allclose(together[i], model.predict(s[None, :], verbose=0)[0],
                           rtol=1e-5, atol=1e-6) for i, s in enumerate(seqs))


@pytest.mark.parametrize("layer", [Scale, ScaleSaysSupports])
def test_a_layer_that_supports_masking_passes_the_mask_on(layer):
    assert layer().supports_masking
    seqs, x = padded()
    assert predicts_as_alone(sequence_model(layer()), seqs, x)


def test_a_layer_that_does_not_support_masking_drops_it():
    assert not ScaleWithoutMasking().supports_masking
    seqs, x = padded()
    assert not predicts_as_alone(sequence_model(ScaleWithoutMasking()), seqs, x)


def test_compute_mask_makes_a_mask():
    keras.utils.set_random_seed(3)
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3, T, 2)).astype(np.float32)
    x[0, 4:] = -1.0
    x[2, 2:] = -1.0
    x[1, 3, 0] = -1.0  # one feature alone keeps the step
    inp = keras.Input((None, 2))
    model = keras.Model(inp, layers.Dense(1)(layers.LSTM(3)(MaskWhere(-1.0)(inp))))
    together = model.predict(x, verbose=0)
    for i, n in enumerate([4, T, 2]):
        np.testing.assert_allclose(together[i], model.predict(x[i:i + 1, :n], verbose=0)[0],
                                   rtol=1e-5, atol=1e-6)


def test_call_receives_the_mask():
    keras.utils.set_random_seed(5)
    inp = keras.Input((None,), dtype="int32")
    emb = layers.Embedding(VOCAB, 5, mask_zero=True)
    h = emb(inp)
    model = keras.Model(inp, MaskedMean()(h))
    steps = keras.Model(inp, h)
    seqs, x = padded()
    got, per_step = model.predict(x, verbose=0), steps.predict(x, verbose=0)
    for i, n in enumerate(LENGTHS):
        np.testing.assert_allclose(got[i], per_step[i, :n].mean(axis=0), rtol=1e-5, atol=1e-7)


def test_the_output_of_a_layer_reading_the_mask_is_unmasked():
    """MaskedMean supports no masking: the Dense after it gets no mask, so
    the loss averages over every example (a masked loss would need steps)."""
    model = sequence_model(MaskedMean(), rnn=False)
    seqs, x = padded()
    y = np.random.default_rng(1).normal(size=(len(seqs), 2)).astype(np.float32)
    pred = model.predict(x, verbose=0)
    np.testing.assert_allclose(model.evaluate(x, y, verbose=0), ((pred - y) ** 2).mean(),
                               rtol=1e-5)


@pytest.mark.parametrize("shape", [(2, 1), (2, 2)])
def test_masked_training_through_a_custom_layer_sharded_equals_one_device(shape):
    seqs, x = padded()
    y = np.random.default_rng(9).normal(size=(len(seqs), 2)).astype(np.float32)
    single = sequence_model(Scale())
    set_distribution(AutoShard(mesh=DeviceMesh(shape, ("data", "model"))))
    sharded = sequence_model(Scale())
    set_distribution(None)
    sharded.set_weights(single.get_weights())
    h1 = single.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0).history["loss"]
    h2 = sharded.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0).history["loss"]
    np.testing.assert_allclose(h2, h1, rtol=1e-5)
    assert predicts_as_alone(sharded, seqs, x)


def test_a_mask_of_the_wrong_shape_is_refused():
    class Bad(Scale):
        def compute_mask(self, inputs, mask=None):
            return ops.ones((T,))

    with pytest.raises(ValueError, match="compute_mask must return"):
        sequence_model(Bad()).predict(padded()[1], verbose=0)
