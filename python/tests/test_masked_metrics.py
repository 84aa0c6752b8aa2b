"""Metrics of a masked output leave the masked steps out, as Keras's
MeanMetricWrapper does (keras/src/metrics/reduction_metrics.py: the mask of
the predictions becomes the sample weight): the accuracies, the errors and
metric functions. The proof: a padded batch gives the metric of its
sequences one by one (each weighted by its length), and NumPy's over the
kept steps, on one device and on data=2,model=2; the confusion metrics
ignore the mask, as Keras's do."""

import numpy as np
import pytest

import autoshard.keras as keras
from autoshard.keras import layers
from autoshard.keras.distribution import AutoShard, DeviceMesh, set_distribution

VOCAB, T, CLASSES = 9, 6, 3
LENGTHS = [6, 3, 1, 4, 2, 5, 6, 1]


def padded(seed=2):
    rng = np.random.default_rng(seed)
    seqs = [rng.integers(1, VOCAB, size=n).astype(np.int32) for n in LENGTHS]
    x = np.zeros((len(seqs), T), np.int32)
    for i, s in enumerate(seqs):
        x[i, :len(s)] = s
    return seqs, x


def step_mae(y_true, y_pred):  # a metric function: Keras wraps it in MeanMetricWrapper
    return keras.ops.mean(keras.ops.abs(y_true - y_pred), axis=-1)


def classifier(mesh=None):
    """Per-step classes: sparse class-id targets."""
    if mesh:
        set_distribution(AutoShard(mesh=DeviceMesh(mesh, ("data", "model"))))
    keras.utils.set_random_seed(4)
    x = keras.Input((None,), dtype="int32")
    h = layers.LSTM(4, return_sequences=True)(layers.Embedding(VOCAB, 5, mask_zero=True)(x))
    model = keras.Model(x, layers.Dense(CLASSES, activation="softmax")(h))
    model.compile("sgd", "sparse_categorical_crossentropy",
                  metrics=["accuracy", keras.metrics.SparseTopKCategoricalAccuracy(k=2)])
    set_distribution(None)
    return model


def regressor(mesh=None):
    """Per-step values in (0, 1): f32 targets of the predictions' shape."""
    if mesh:
        set_distribution(AutoShard(mesh=DeviceMesh(mesh, ("data", "model"))))
    keras.utils.set_random_seed(5)
    x = keras.Input((None,), dtype="int32")
    h = layers.GRU(4, return_sequences=True)(layers.Embedding(VOCAB, 5, mask_zero=True)(x))
    model = keras.Model(x, layers.Dense(2, activation="sigmoid")(h))
    model.compile("sgd", "mse", metrics=["mae", "mse", "binary_accuracy", step_mae,
                                         keras.metrics.Precision()])
    set_distribution(None)
    return model


def targets(kind, seed=7):
    rng = np.random.default_rng(seed)
    if kind == "classifier":
        return rng.integers(0, CLASSES, size=(len(LENGTHS), T)).astype(np.int32)
    return rng.uniform(size=(len(LENGTHS), T, 2)).astype(np.float32)


def numpy_metrics(kind, pred, y, keep):
    """The metrics over the kept steps, from the predictions."""
    if kind == "classifier":
        p, t = pred[keep], y[keep]
        top2 = np.argsort(-p, axis=-1)[:, :2]
        return {"accuracy": np.mean(p.argmax(-1) == t),
                "sparse_top_k_categorical_accuracy": np.mean((top2 == t[:, None]).any(-1))}
    p, t = pred[keep], y[keep]
    every = pred.reshape(-1, 2), y.reshape(-1, 2)  # Precision: every step, masked or not
    tp = ((every[0] > 0.5) & (every[1] != 0)).sum()
    return {"mae": np.abs(p - t).mean(), "mse": ((p - t) ** 2).mean(),
            "binary_accuracy": np.mean((p > 0.5) == (t > 0.5)),
            "step_mae": np.abs(p - t).mean(), "precision": tp / (every[0] > 0.5).sum()}


MODELS = {"classifier": classifier, "regressor": regressor}


@pytest.mark.parametrize("mesh", [None, (2, 2)])
@pytest.mark.parametrize("kind", sorted(MODELS))
def test_a_padded_batch_has_the_metrics_of_its_sequences_one_by_one(kind, mesh):
    model = MODELS[kind](mesh)
    if mesh:
        model.set_weights(MODELS[kind]().get_weights())
    seqs, x = padded()
    y = targets(kind)
    together = model.evaluate(x, y, batch_size=len(seqs), verbose=0, return_dict=True)
    # NumPy over the kept steps (the predictions' own padded batch).
    expected = numpy_metrics(kind, model.predict(x, verbose=0), y, x != 0)
    for name, value in expected.items():
        np.testing.assert_allclose(together[name], value, rtol=1e-5, err_msg=name)
    # One by one, unpadded: each sequence's metrics weighted by its length.
    alone = [model.evaluate(s[None, :], y[i:i + 1, :len(s)], verbose=0, return_dict=True)
             for i, s in enumerate(seqs)]
    for name in expected:
        if name == "precision":
            continue  # a ratio of counts, not a mean of steps
        by_length = np.dot([a[name] for a in alone], LENGTHS) / sum(LENGTHS)
        np.testing.assert_allclose(together[name], by_length, rtol=1e-5, err_msg=name)
    # Batches of 2 (one padded length): the same epoch's metrics.
    halves = model.evaluate(x, y, batch_size=2, verbose=0, return_dict=True)
    for name in expected:
        np.testing.assert_allclose(halves[name], together[name], rtol=1e-5, err_msg=name)


def test_sharded_metrics_equal_one_device_in_training():
    seqs, x = padded()
    y = targets("classifier")
    single, sharded = classifier(), classifier((2, 2))
    sharded.set_weights(single.get_weights())
    h1 = single.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0).history
    h2 = sharded.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0).history
    for name in h1:
        np.testing.assert_allclose(h2[name], h1[name], rtol=1e-5, err_msg=name)


def test_without_a_mask_the_padding_counts():
    """The same model without mask_zero: its accuracy counts the padding
    steps (so the test above would fail if masks were ignored)."""
    keras.utils.set_random_seed(4)
    x_in = keras.Input((None,), dtype="int32")
    h = layers.LSTM(4, return_sequences=True)(layers.Embedding(VOCAB, 5)(x_in))
    model = keras.Model(x_in, layers.Dense(CLASSES, activation="softmax")(h))
    model.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])
    seqs, x = padded()
    y = targets("classifier")
    got = model.evaluate(x, y, verbose=0, return_dict=True)["accuracy"]
    pred = model.predict(x, verbose=0).argmax(-1)
    np.testing.assert_allclose(got, np.mean(pred == y), rtol=1e-6)
