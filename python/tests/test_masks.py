"""Keras's masks: Embedding(mask_zero=True) and Masking make one, the layers
that support masking pass it on, the recurrent layers skip masked steps,
GlobalAveragePooling1D averages the kept ones and the loss leaves masked
steps out. The proof: a padded batch predicts, and trains, as its sequences
one by one (independent of the padding), on one device and sharded."""

import numpy as np
import pytest

import autoshard.keras as keras
from autoshard.keras import layers
from autoshard.keras.distribution import (AutoShard, DeviceMesh, LayoutMap, ModelParallel,
                                          set_distribution)

VOCAB, T = 9, 6
# Right-padded id sequences of lengths 6, 3, 1, 4 (0 pads).
LENGTHS = [6, 3, 1, 4]


def padded(lengths=LENGTHS, seed=2, left=False):
    rng = np.random.default_rng(seed)
    seqs = [rng.integers(1, VOCAB, size=n).astype(np.int32) for n in lengths]
    x = np.zeros((len(seqs), T), np.int32)
    for i, s in enumerate(seqs):
        if left:
            x[i, T - len(s):] = s
        else:
            x[i, :len(s)] = s
    return seqs, x


def sequence_model(rnn, head=None, seed=4):
    keras.utils.set_random_seed(seed)
    x = keras.Input((None,), dtype="int32")
    h = layers.Embedding(VOCAB, 5, mask_zero=True)(x)
    h = rnn(h)
    out = (head or layers.Dense(2, name="head"))(h)
    model = keras.Model(x, out)
    model.compile(keras.optimizers.SGD(learning_rate=0.1), "mse")
    return model


RNNS = {
    "lstm": lambda: layers.LSTM(4),
    "gru": lambda: layers.GRU(4),
    "simple_rnn": lambda: layers.SimpleRNN(4),
    "lstm_backwards": lambda: layers.LSTM(4, go_backwards=True),
    "bidirectional": lambda: layers.Bidirectional(layers.GRU(3)),
}


@pytest.mark.parametrize("kind", sorted(RNNS))
@pytest.mark.parametrize("left", [False, True])
def test_a_padded_batch_predicts_as_each_sequence_alone(kind, left):
    model = sequence_model(RNNS[kind]())
    seqs, x = padded(left=left)
    together = model.predict(x, verbose=0)
    for i, s in enumerate(seqs):
        alone = model.predict(s[None, :], verbose=0)
        np.testing.assert_allclose(together[i], alone[0], rtol=1e-5, atol=1e-6)


def test_without_mask_zero_the_padding_changes_the_output():
    keras.utils.set_random_seed(4)
    x = keras.Input((None,), dtype="int32")
    out = layers.Dense(2)(layers.LSTM(4)(layers.Embedding(VOCAB, 5)(x)))
    model = keras.Model(x, out)
    seqs, batch = padded()
    assert not np.allclose(model.predict(batch, verbose=0)[1],
                           model.predict(seqs[1][None, :], verbose=0)[0], atol=1e-4)


def sequences_model(rnn_kind="lstm", seed=4, pooled=False):
    """Embedding(mask_zero) -> LSTM(return_sequences) -> Dense per step (the
    mask passes through Dense) [-> GlobalAveragePooling1D]."""
    keras.utils.set_random_seed(seed)
    x = keras.Input((None,), dtype="int32")
    h = layers.Embedding(VOCAB, 5, mask_zero=True)(x)
    rnn = {"lstm": layers.LSTM, "gru": layers.GRU, "simple_rnn": layers.SimpleRNN}[rnn_kind]
    h = rnn(4, return_sequences=True)(h)
    h = layers.Dropout(0.0)(layers.Dense(3, activation="tanh")(h))
    if pooled:
        h = layers.GlobalAveragePooling1D()(h)
    model = keras.Model(x, h)
    model.compile(keras.optimizers.SGD(learning_rate=0.5), "mse")
    return model


def test_global_average_pooling_takes_the_mean_of_the_kept_steps():
    model = sequences_model(pooled=True)
    steps = keras.Model(model.inputs, model.layers[-2].output)
    seqs, x = padded()
    pooled, per_step = model.predict(x, verbose=0), steps.predict(x, verbose=0)
    for i, n in enumerate(LENGTHS):
        np.testing.assert_allclose(pooled[i], per_step[i, :n].mean(axis=0), rtol=1e-5, atol=1e-7)
        alone = model.predict(seqs[i][None, :], verbose=0)[0]
        np.testing.assert_allclose(pooled[i], alone, rtol=1e-5, atol=1e-6)


def test_the_loss_of_a_masked_output_is_the_mean_over_its_kept_steps():
    model = sequences_model()
    seqs, x = padded()
    rng = np.random.default_rng(7)
    y = rng.normal(size=(len(seqs), T, 3)).astype(np.float32)
    batch_loss = model.evaluate(x, y, batch_size=len(seqs), verbose=0)
    # Keras: sum over kept steps of the per-step mean / the kept steps.
    pred = model.predict(x, verbose=0)
    mask = x != 0
    per_step = ((pred - y) ** 2).mean(axis=-1)
    np.testing.assert_allclose(batch_loss, per_step[mask].sum() / mask.sum(), rtol=1e-5)
    # And one by one: each sequence's loss weighted by its length.
    alone = [model.evaluate(s[None, :], y[i:i + 1, :len(s)], verbose=0)
             for i, s in enumerate(seqs)]
    np.testing.assert_allclose(batch_loss, np.dot(alone, LENGTHS) / sum(LENGTHS), rtol=1e-5)


@pytest.mark.parametrize("loss", ["mse", "sparse_categorical_crossentropy",
                                  "binary_crossentropy"])
def test_a_training_step_on_a_padded_batch_is_the_sequences_steps_weighted(loss):
    """SGD: the step on the padded batch equals the sum of each sequence's
    own step times its share of the kept steps (the loss's gradient)."""
    keras.utils.set_random_seed(6)
    x_in = keras.Input((None,), dtype="int32")
    h = layers.LSTM(4, return_sequences=True)(layers.Embedding(VOCAB, 5, mask_zero=True)(x_in))
    out = layers.Dense(3, activation="sigmoid" if loss != "mse" else None)(h)
    model = keras.Model(x_in, out)
    model.compile(keras.optimizers.SGD(learning_rate=0.3), loss)
    seqs, x = padded()
    rng = np.random.default_rng(8)
    if loss == "sparse_categorical_crossentropy":
        y = rng.integers(0, 3, size=(len(seqs), T)).astype(np.int32)
    else:
        y = rng.uniform(size=(len(seqs), T, 3)).astype(np.float32)
    start = model.get_weights()
    model.train_on_batch(x, y)
    together = [w - w0 for w, w0 in zip(model.get_weights(), start)]
    expected = [np.zeros_like(w) for w in start]
    for i, s in enumerate(seqs):
        model.set_weights(start)
        model.train_on_batch(s[None, :], y[i:i + 1, :len(s)])
        share = len(s) / sum(LENGTHS)
        for e, w, w0 in zip(expected, model.get_weights(), start):
            e += share * (w - w0)
    for a, b in zip(together, expected):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_masking_layer_masks_steps_whose_features_all_equal_the_value():
    keras.utils.set_random_seed(3)
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3, T, 2)).astype(np.float32)
    x[0, 4:] = -1.0
    x[2, 2:] = -1.0
    x[1, 3, 0] = -1.0  # one feature alone keeps the step
    inp = keras.Input((None, 2))
    out = layers.Dense(1)(layers.GRU(3)(layers.Masking(mask_value=-1.0)(inp)))
    model = keras.Model(inp, out)
    together = model.predict(x, verbose=0)
    for i, n in enumerate([4, T, 2]):
        np.testing.assert_allclose(together[i], model.predict(x[i:i + 1, :n], verbose=0)[0],
                                   rtol=1e-5, atol=1e-6)


def layout(mesh):
    layout_map = LayoutMap(mesh)
    layout_map["embedding.*embeddings"] = (None, "model")
    layout_map[".*lstm.*kernel"] = (None, "model")
    layout_map["dense.*kernel"] = ("model", None)
    return ModelParallel(layout_map=layout_map, batch_dim_name="data")


@pytest.mark.parametrize("planned", [False, True])
@pytest.mark.parametrize("shape", [(2, 1), (1, 2), (2, 2)])
def test_masked_training_sharded_equals_one_device(shape, planned):
    seqs, x = padded([6, 3, 1, 4, 2, 5, 6, 1])
    rng = np.random.default_rng(9)
    y = rng.normal(size=(len(seqs), T, 3)).astype(np.float32)
    single = sequences_model()
    weights = single.get_weights()
    mesh = DeviceMesh(shape, ("data", "model"))
    set_distribution(AutoShard(mesh=mesh) if planned else layout(mesh))
    sharded = sequences_model()
    sharded.set_weights(weights)
    set_distribution(None)
    h1 = single.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    h2 = sharded.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    np.testing.assert_allclose(h1.history["loss"], h2.history["loss"], rtol=1e-5)
    np.testing.assert_allclose(single.predict(x, verbose=0), sharded.predict(x, verbose=0),
                               rtol=1e-4, atol=1e-6)


def save(model, tmp_path, suffix):
    """The model saved as .keras, .h5 or TF.js (a directory), and its path."""
    path = str(tmp_path / f"m{suffix}")
    model.save(path, **({"save_format": "tfjs"} if suffix == "_tfjs" else {}))
    return path


@pytest.mark.parametrize("suffix", [".keras", ".h5", "_tfjs"])
def test_a_masked_model_saves_and_loads(tmp_path, suffix):
    model = sequences_model(pooled=True)
    seqs, x = padded()
    path = save(model, tmp_path, suffix)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0),
                               rtol=1e-6)
    for i, s in enumerate(seqs):  # the loaded model masks too
        np.testing.assert_allclose(loaded.predict(s[None, :], verbose=0)[0],
                                   model.predict(x, verbose=0)[i], rtol=1e-5, atol=1e-6)


def test_a_custom_loss_function_on_a_masked_output_is_refused():
    model = sequences_model()
    model.compile(keras.optimizers.SGD(), lambda y, p: keras.ops.mean((y - p) ** 2))
    seqs, x = padded()
    with pytest.raises(Exception, match="masked output"):
        model.train_on_batch(x, np.zeros((len(seqs), T, 3), np.float32))


def test_attention_leaves_masked_keys_out():
    """Self-attention over a masked sequence: the kept steps attend to kept
    keys only, so a padded batch pools (over the kept steps) as each alone."""
    keras.utils.set_random_seed(5)
    x = keras.Input((None,), dtype="int32")
    h = layers.Embedding(VOCAB, 8, mask_zero=True)(x)
    h = layers.MultiHeadAttention(num_heads=2, key_dim=4)(h, h)
    out = layers.Dense(2)(layers.GlobalAveragePooling1D()(h))
    model = keras.Model(x, out)
    seqs, batch = padded()
    together = model.predict(batch, verbose=0)
    for i, s in enumerate(seqs):
        np.testing.assert_allclose(together[i], model.predict(s[None, :], verbose=0)[0],
                                   rtol=1e-5, atol=1e-6)


def _masked_bn_model():
    inputs = keras.Input((6, 3))
    h = layers.Masking(0.0)(inputs)
    h = layers.BatchNormalization(momentum=0.5, name="bn")(h)
    out = layers.LSTM(4, name="lstm")(h)
    model = keras.Model(inputs, out)
    model.compile(keras.optimizers.SGD(0.1), "mse")
    return model


def _padded_features(seed=9):
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(4, 6, 3)) * [1, 3, 5] + [2, -1, 0]).astype(np.float32)
    lengths = [6, 2, 4, 3]
    for i, n in enumerate(lengths):
        x[i, n:] = 0.0  # padding, masked by Masking(0)
    keep = np.array([[t < n for t in range(6)] for n in lengths], np.float64)
    return x, keep


def test_batch_normalization_takes_the_moments_of_the_kept_steps():
    # keras/src/layers/normalization/batch_normalization.py, _moments with a
    # mask: sum(m x) / (sum m + 1e-7), sum(m (m x - mean)^2) / (sum m + 1e-7);
    # the moving statistics move toward them (momentum 0.5 from 0 and 1).
    x, keep = _padded_features()
    model = _masked_bn_model()
    model.train_on_batch(x, np.zeros((4, 4), np.float32))
    m = keep[..., None]
    n = m.sum((0, 1)) + 1e-7
    mean = (m * x).sum((0, 1)) / n
    var = (m * (m * x - mean) ** 2).sum((0, 1)) / n
    bn = model.get_layer("bn")
    moving_mean, moving_var = [w for w in bn.get_weights()[2:]]
    np.testing.assert_allclose(moving_mean, 0.5 * mean, rtol=1e-5)
    np.testing.assert_allclose(moving_var, 0.5 + 0.5 * var, rtol=1e-5)
    # The padding is left out: the statistics differ from every step's.
    assert not np.allclose(moving_mean, 0.5 * x.mean((0, 1)), rtol=1e-2)


@pytest.mark.parametrize("shape", [(2, 1), (2, 2)])
def test_masked_batch_normalization_sharded_equals_one_device(shape):
    x, _ = _padded_features()
    y = np.random.default_rng(1).normal(size=(4, 4)).astype(np.float32)
    one = _masked_bn_model()
    one.compile(keras.optimizers.SGD(0.1), "mse")
    weights = one.get_weights()
    with AutoShard(DeviceMesh(shape, ("data", "model")), batch_dim_name="data").scope():
        split = _masked_bn_model()
    split.compile(keras.optimizers.SGD(0.1), "mse")
    split.set_weights(weights)
    h1 = one.fit(x, y, batch_size=4, epochs=3, shuffle=False, verbose=0).history["loss"]
    h2 = split.fit(x, y, batch_size=4, epochs=3, shuffle=False, verbose=0).history["loss"]
    np.testing.assert_allclose(h1, h2, rtol=1e-5)
    for a, b in zip(one.get_weights(), split.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
