"""keras.layers.Attention (keras/src/layers/attention/attention.py) and
AdditiveAttention (additive_attention.py), built by
the Keras layer table (src/io/keras/layers/attention.cc): its outputs against
NumPy computed here from Keras's definition, with masks, the causal mask and
the scores; training sharded (model=2, data=2) equals one device; a .keras
file round-trips it, call arguments included."""

import json
import zipfile

import numpy as np
import pytest

import autoshard.keras as keras
from autoshard.keras import layers
from autoshard.keras.distribution import (DeviceMesh, LayoutMap, ModelParallel,
                                          set_distribution)

RNG = np.random.default_rng(5)
Q = RNG.normal(size=(4, 3, 5)).astype(np.float32)
V = RNG.normal(size=(4, 6, 5)).astype(np.float32)
K = RNG.normal(size=(4, 6, 5)).astype(np.float32)


def reference(q, v, k=None, mode="dot", scale=1.0, weight=1.0, causal=False, q_mask=None,
              v_mask=None):
    """Keras's Attention in float64: _calculate_scores, _calculate_score_mask,
    _apply_scores, then the query's mask."""
    q, v = q.astype(np.float64), v.astype(np.float64)
    k = v if k is None else k.astype(np.float64)
    if mode == "dot":
        scores = scale * (q @ k.transpose(0, 2, 1))
    elif mode == "additive":  # AdditiveAttention: scale is a vector over dim
        scores = (scale * np.tanh(q[:, :, None, :] + k[:, None, :, :])).sum(-1)
    else:
        scores = weight * np.tanh(scale * (q[:, :, None, :] + k[:, None, :, :])).sum(-1)
    keep = np.ones(scores.shape, bool)
    if causal:  # row i sees columns j <= i
        keep &= np.tril(np.ones(scores.shape[1:], bool))[None]
    if v_mask is not None:
        keep &= v_mask[:, None, :].astype(bool)
    scores = scores - 1e9 * (~keep)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    out = p @ v
    if q_mask is not None:
        out *= q_mask[:, :, None]
    return out, p


def attention_model(tq, tv, key=False, **call):
    inputs = [keras.Input((tq, 5)), keras.Input((tv, 5))] + ([keras.Input((tv, 5))] if key
                                                             else [])
    layer = layers.Attention(**call.pop("init", {}))
    out = layer(inputs, **call)
    return keras.Model(inputs, out), layer


@pytest.mark.parametrize("mode", ["dot", "concat"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tq", [3, 8])
def test_outputs_and_scores_equal_numpy(mode, causal, tq):
    q = RNG.normal(size=(4, tq, 5)).astype(np.float32)
    model, layer = attention_model(tq, 6, init={"use_scale": True, "score_mode": mode},
                                   use_causal_mask=causal, return_attention_scores=True)
    # Keras's weights in build's order, moved away from their initial ones
    # (both are used).
    assert [w.path for w in model.weights] == [f"{layer.name}/scale"] + (
        [f"{layer.name}/concat_score_weight"] if mode == "concat" else [])
    model.set_weights([np.float32(0.7), np.float32(1.3)][:len(model.weights)])
    out, scores = model.predict([q, V], verbose=0)
    want_out, want_scores = reference(q, V, mode=mode, scale=0.7, weight=1.3, causal=causal)
    np.testing.assert_allclose(out, want_out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("causal", [False, True])
def test_additive_attention_equals_numpy_and_round_trips(tmp_path, causal):
    # additive_attention.py: scores = sum(scale * tanh(q + k), -1), scale [dim].
    q_in, v_in = keras.Input((3, 5)), keras.Input((6, 5))
    layer = layers.AdditiveAttention()
    model = keras.Model([q_in, v_in], layer([q_in, v_in], use_causal_mask=causal))
    model.predict([Q, V], verbose=0)
    scale = RNG.normal(size=5).astype(np.float32)
    assert [w.path for w in model.weights] == [f"{layer.name}/scale"]
    model.set_weights([scale])
    np.testing.assert_allclose(model.predict([Q, V], verbose=0),
                               reference(Q, V, mode="additive", scale=scale, causal=causal)[0],
                               rtol=1e-5, atol=1e-6)
    model.save(tmp_path / "additive.keras")
    with zipfile.ZipFile(tmp_path / "additive.keras") as z:
        config = json.loads(z.read("config.json"))
    [entry] = [e for e in config["config"]["layers"] if e["class_name"] == "AdditiveAttention"]
    assert "score_mode" not in entry["config"] and entry["config"]["use_scale"] is True
    loaded = keras.models.load_model(tmp_path / "additive.keras")
    np.testing.assert_array_equal(loaded.predict([Q, V], verbose=0),
                                  model.predict([Q, V], verbose=0))
    no_scale = keras.Model([q_in, v_in], layers.AdditiveAttention(use_scale=False)([q_in, v_in]))
    np.testing.assert_allclose(no_scale.predict([Q, V], verbose=0),
                               reference(Q, V, mode="additive")[0], rtol=1e-5, atol=1e-6)


def test_a_separate_key_and_no_scale():
    model, layer = attention_model(3, 6, key=True)
    np.testing.assert_allclose(model.predict([Q, V, K], verbose=0), reference(Q, V, K)[0],
                               rtol=1e-5, atol=1e-6)
    assert model.weights == []  # use_scale=False, "dot": no weights


def test_masks_of_query_and_value_from_embeddings():
    # Ids 0 pad (mask_zero): the value's padded steps get no weight, the
    # query's padded steps output zeros and stay masked after the layer.
    keras.utils.set_random_seed(1)
    q_ids = np.array([[1, 2, 0], [3, 0, 0]], np.int32)
    v_ids = np.array([[4, 5, 6, 0], [7, 0, 0, 0]], np.int32)
    qi, vi = keras.Input((3,), dtype="int32"), keras.Input((4,), dtype="int32")
    embed = layers.Embedding(8, 5, mask_zero=True)
    attended = layers.Attention()([embed(qi), embed(vi)])
    pooled = layers.GlobalAveragePooling1D()(attended)  # the query's mask: a masked mean
    model = keras.Model([qi, vi], [attended, pooled])
    [table] = model.get_weights()
    out, mean = model.predict([q_ids, v_ids], verbose=0)
    want, _ = reference(table[q_ids], table[v_ids], q_mask=(q_ids > 0).astype(np.float64),
                        v_mask=(v_ids > 0))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    assert np.all(out[0, 2] == 0) and np.all(out[1, 1:] == 0)
    kept = (q_ids > 0)[:, :, None]
    np.testing.assert_allclose(mean, (want * kept).sum(1) / kept.sum(1), rtol=1e-5, atol=1e-6)


def model_of_two_sequences(dropout=0.0):
    keras.utils.set_random_seed(7)
    q_in, v_in = keras.Input((3, 5)), keras.Input((6, 5))
    q = layers.Dense(8, name="dense_q")(q_in)
    v = layers.Dense(8, name="dense_v")(v_in)
    h = layers.Attention(use_scale=True, dropout=dropout, seed=3, name="attention")(
        [q, v], use_causal_mask=True)
    out = layers.Dense(2, name="dense_out")(layers.Flatten()(h))
    model = keras.Model([q_in, v_in], out)
    model.compile(keras.optimizers.SGD(learning_rate=0.05), "mse")
    return model


def layout(mesh):
    layout_map = LayoutMap(mesh)
    layout_map["dense_[qv].*kernel"] = (None, "model")  # the attention's features split
    layout_map["dense_out.*kernel"] = ("model", None)
    return ModelParallel(layout_map=layout_map, batch_dim_name="data")


@pytest.mark.parametrize("shape", [(1, 2), (2, 1), (2, 2)])
@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_training_sharded_equals_one_device(shape, dropout):
    rng = np.random.default_rng(11)
    y = rng.normal(size=(8, 2)).astype(np.float32)
    q, v = rng.normal(size=(8, 3, 5)).astype(np.float32), rng.normal(size=(8, 6, 5)).astype(
        np.float32)
    single = model_of_two_sequences(dropout)
    weights = single.get_weights()
    set_distribution(layout(DeviceMesh(shape, ("data", "model"))))
    try:
        sharded = model_of_two_sequences(dropout)
    finally:
        set_distribution(None)
    sharded.set_weights(weights)
    h1 = single.fit([q, v], y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    h2 = sharded.fit([q, v], y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    np.testing.assert_allclose(h1.history["loss"], h2.history["loss"], rtol=1e-5)
    if dropout == 0:
        assert h1.history["loss"][-1] < h1.history["loss"][0]  # it learns
    np.testing.assert_allclose(single.predict([q, v], verbose=0),
                               sharded.predict([q, v], verbose=0), rtol=1e-4, atol=1e-6)
    for a, b in zip(single.get_weights(), sharded.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_a_keras_file_round_trips_config_weights_and_call_arguments(tmp_path):
    model = model_of_two_sequences()
    path = tmp_path / "attention.keras"
    model.save(path)
    with zipfile.ZipFile(path) as z:
        config = json.loads(z.read("config.json"))
    [entry] = [e for e in config["config"]["layers"] if e["class_name"] == "Attention"]
    # Keras 3's form: get_config's fields; the call argument in the node's kwargs.
    assert entry["config"]["use_scale"] is True and entry["config"]["score_mode"] == "dot"
    assert entry["inbound_nodes"][0]["kwargs"] == {"use_causal_mask": True}
    loaded = keras.models.load_model(path)
    x = [RNG.normal(size=(2, 3, 5)).astype(np.float32),
         RNG.normal(size=(2, 6, 5)).astype(np.float32)]
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0),
                               rtol=1e-6)
    # Without the call argument the model differs: the file really carries it.
    entry["inbound_nodes"][0]["kwargs"] = {}
    noncausal = tmp_path / "noncausal.keras"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(noncausal, "w") as dst:
        for item in src.namelist():
            data = json.dumps(config) if item == "config.json" else src.read(item)
            dst.writestr(item, data)
    other = keras.models.load_model(noncausal).predict(x, verbose=0)
    assert not np.allclose(other, model.predict(x, verbose=0), rtol=1e-3)


def test_bad_arguments_are_refused_as_keras_refuses_them():
    with pytest.raises(ValueError, match="score_mode"):
        layers.Attention(score_mode="add")
    with pytest.raises(ValueError, match=r"\[query, value\]"):
        layers.Attention()(keras.Input((3, 5)))
    with pytest.raises(ValueError, match="dropout"):
        layers.Attention(dropout=1.0)
    layer = layers.Attention()
    q, v = keras.Input((3, 5)), keras.Input((4, 5))
    layer([q, v], use_causal_mask=True)
    with pytest.raises(ValueError, match="same use_causal_mask"):
        layer([q, v])
