"""Recurrent state as Keras's RNN call has it: return_state (the output,
then h, and c for LSTM), initial_state, the encoder-decoder pattern, and
Bidirectional with a backward layer of its own, against a NumPy reference
of Keras's cells; saved and loaded; stateful refused."""

import numpy as np
import pytest

import autoshard.keras as keras
from autoshard.keras import layers


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def lstm_np(x, kernel, recurrent, bias, h=None, c=None, backwards=False):
    """Keras's LSTM in float64: the sequence (processed order) and h, c."""
    units = recurrent.shape[0]
    b = x.shape[0]
    h = np.zeros((b, units)) if h is None else h.astype(np.float64)
    c = np.zeros((b, units)) if c is None else c.astype(np.float64)
    seq = []
    steps = range(x.shape[1] - 1, -1, -1) if backwards else range(x.shape[1])
    for t in steps:
        z = x[:, t] @ kernel + h @ recurrent + bias
        i, f, g, o = np.split(z, 4, axis=-1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        seq.append(h)
    return np.stack(seq, axis=1), h, c


def simple_rnn_np(x, kernel, recurrent, bias, backwards=False):
    """Keras's SimpleRNN in float64: the sequence (processed order)."""
    h = np.zeros((x.shape[0], recurrent.shape[0]))
    seq = []
    for t in (range(x.shape[1] - 1, -1, -1) if backwards else range(x.shape[1])):
        h = np.tanh(x[:, t] @ kernel + h @ recurrent + bias)
        seq.append(h)
    return np.stack(seq, axis=1)


def gru_np(x, kernel, recurrent, bias, backwards=False):
    """Keras 3's GRU (reset_after) in float64: the sequence (processed order)."""
    units = recurrent.shape[0]
    h = np.zeros((x.shape[0], units))
    seq = []
    steps = range(x.shape[1] - 1, -1, -1) if backwards else range(x.shape[1])
    for t in steps:
        xz = x[:, t] @ kernel + bias[0]
        rz = h @ recurrent + bias[1]
        z = sigmoid(xz[:, :units] + rz[:, :units])
        r = sigmoid(xz[:, units:2 * units] + rz[:, units:2 * units])
        hh = np.tanh(xz[:, 2 * units:] + r * rz[:, 2 * units:])
        h = z * h + (1 - z) * hh
        seq.append(h)
    return np.stack(seq, axis=1)


def weights_of(model, layer):
    """A layer's weights from the model, in its order (Keras 3 paths)."""
    return [v.numpy() for v in model.weights if v.path.startswith(layer + "/")]


def data(shape, seed):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def seq2seq(latent=4, tokens=3):
    keras.utils.set_random_seed(2)
    enc_in = keras.Input((None, tokens))
    _, h, c = layers.LSTM(latent, return_state=True, name="encoder")(enc_in)
    dec_in = keras.Input((None, tokens))
    seq, _, _ = layers.LSTM(latent, return_sequences=True, return_state=True,
                            name="decoder")(dec_in, initial_state=[h, c])
    out = layers.Dense(tokens, name="head")(seq)
    model = keras.Model([enc_in, dec_in], out)
    model.compile(keras.optimizers.SGD(learning_rate=0.1), "mse")
    return model


def seq2seq_np(model, enc, dec):
    we = [w.astype(np.float64) for w in weights_of(model, "encoder")]
    wd = [w.astype(np.float64) for w in weights_of(model, "decoder")]
    kh, bh = [w.astype(np.float64) for w in weights_of(model, "head")]
    _, h, c = lstm_np(enc.astype(np.float64), *we)
    seq, _, _ = lstm_np(dec.astype(np.float64), *wd, h=h, c=c)
    return seq @ kh + bh


def test_return_state_gives_the_output_and_the_final_states():
    keras.utils.set_random_seed(1)
    inp = keras.Input((5, 3))
    outs = layers.LSTM(4, return_sequences=True, return_state=True, name="lstm")(inp)
    assert isinstance(outs, list) and len(outs) == 3
    model = keras.Model(inp, outs)
    x = data((2, 5, 3), 1)
    seq, h, c = model.predict(x, verbose=0)
    ref_seq, ref_h, ref_c = lstm_np(x.astype(np.float64), *weights_of(model, "lstm"))
    np.testing.assert_allclose(seq, ref_seq, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(h, ref_h, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(c, ref_c, rtol=1e-4, atol=1e-6)
    gru = layers.GRU(3, return_state=True, name="gru")(inp)
    assert len(gru) == 2  # output, h
    gru_model = keras.Model(inp, gru)
    out, h = gru_model.predict(x, verbose=0)
    ref = gru_np(x.astype(np.float64), *weights_of(gru_model, "gru"))[:, -1]
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(h, ref, rtol=1e-4, atol=1e-6)


def test_an_encoder_state_starts_the_decoder():
    model = seq2seq()
    enc, dec = data((3, 6, 3), 2), data((3, 4, 3), 3)
    np.testing.assert_allclose(model.predict([enc, dec], verbose=0), seq2seq_np(model, enc, dec),
                               rtol=1e-4, atol=1e-6)
    # The states matter: another encoder input changes the decoder's output.
    other = model.predict([data((3, 6, 3), 4), dec], verbose=0)
    assert not np.allclose(other, model.predict([enc, dec], verbose=0), atol=1e-4)


def test_seq2seq_trains_and_gradients_reach_the_encoder():
    model = seq2seq()
    enc, dec, y = data((8, 6, 3), 2), data((8, 4, 3), 3), data((8, 4, 3), 5)
    before = weights_of(model, "encoder")[0].copy()
    losses = model.fit([enc, dec], y, batch_size=4, epochs=8, verbose=0).history["loss"]
    assert losses[-1] < losses[0]
    assert not np.allclose(weights_of(model, "encoder")[0], before)


@pytest.mark.parametrize("suffix", [".keras", ".h5", "_tfjs"])
def test_seq2seq_saves_and_loads_with_its_states(tmp_path, suffix):
    model = seq2seq()
    enc, dec = data((3, 6, 3), 2), data((3, 4, 3), 3)
    path = str(tmp_path / f"s2s{suffix}")
    model.save(path, **({"save_format": "tfjs"} if suffix == "_tfjs" else {}))
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(loaded.predict([enc, dec], verbose=0),
                               model.predict([enc, dec], verbose=0), rtol=1e-6, atol=1e-7)


def test_a_model_of_states_names_its_outputs_apart():
    model = seq2seq()
    enc_in = model.inputs[0]
    _, h, c = model.get_layer("encoder")(enc_in)
    encoder = keras.Model(enc_in, [h, c])
    got_h, got_c = encoder.predict(data((2, 6, 3), 2), verbose=0)
    _, ref_h, ref_c = lstm_np(data((2, 6, 3), 2).astype(np.float64),
                              *weights_of(model, "encoder"))
    np.testing.assert_allclose(got_h, ref_h, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got_c, ref_c, rtol=1e-4, atol=1e-6)


def bidirectional_own_backward():
    keras.utils.set_random_seed(3)
    inp = keras.Input((5, 3))
    bi = layers.Bidirectional(
        layers.LSTM(4, return_sequences=True, name="fw"),
        backward_layer=layers.SimpleRNN(2, return_sequences=True, go_backwards=True, name="bw"),
        name="bi")
    model = keras.Model(inp, bi(inp))
    model.compile(keras.optimizers.SGD(learning_rate=0.1), "mse")
    return model


def test_bidirectional_with_its_own_backward_layer():
    model = bidirectional_own_backward()
    x = data((2, 5, 3), 6)
    weights = weights_of(model, "bi")
    assert [w.shape for w in weights] == [(3, 16), (4, 16), (16,), (3, 2), (2, 2), (2,)]
    fw, _, _ = lstm_np(x.astype(np.float64), *weights[:3])
    bw = simple_rnn_np(x.astype(np.float64), *weights[3:], backwards=True)[:, ::-1]  # time order
    np.testing.assert_allclose(model.predict(x, verbose=0), np.concatenate([fw, bw], axis=-1),
                               rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("suffix", [".keras", ".h5", "_tfjs"])
def test_bidirectional_with_its_own_backward_layer_saves_and_loads(tmp_path, suffix):
    model = bidirectional_own_backward()
    x = data((2, 5, 3), 6)
    path = str(tmp_path / f"bi{suffix}")
    model.save(path, **({"save_format": "tfjs"} if suffix == "_tfjs" else {}))
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0),
                               rtol=1e-6, atol=1e-7)


def test_bidirectional_return_state_and_unmerged_outputs():
    keras.utils.set_random_seed(3)
    inp = keras.Input((5, 3))
    outs = layers.Bidirectional(layers.LSTM(2, return_state=True, name="lstm"), merge_mode=None,
                                name="bi")(inp)
    assert len(outs) == 6  # forward, backward, then forward h, c and backward h, c
    model = keras.Model(inp, outs)
    x = data((2, 5, 3), 8)
    got = model.predict(x, verbose=0)
    w = weights_of(model, "bi")
    _, fh, fc = lstm_np(x.astype(np.float64), *w[:3])
    _, bh, bc = lstm_np(x.astype(np.float64), *w[3:], backwards=True)
    for a, b in zip(got, [fh, bh, fh, fc, bh, bc]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_stateful_and_mask_arguments_are_refused_with_one_line():
    with pytest.raises(ValueError, match="stateful=True is not supported"):
        layers.LSTM(3, stateful=True)
    inp = keras.Input((4, 2))
    with pytest.raises(ValueError, match="mask_zero=True"):
        layers.LSTM(3)(inp, mask=inp)
    with pytest.raises(ValueError, match="backward_layer must be an LSTM"):
        layers.Bidirectional(layers.LSTM(2), backward_layer=layers.Dense(2))


@pytest.mark.parametrize("shape", [(2, 1), (1, 2), (2, 2)])
def test_seq2seq_sharded_trains_as_one_device(shape):
    from autoshard.keras.distribution import (DeviceMesh, LayoutMap, ModelParallel,
                                              set_distribution)

    enc, dec, y = data((8, 6, 3), 2), data((8, 4, 3), 3), data((8, 4, 3), 5)
    single = seq2seq()
    weights = single.get_weights()
    mesh = DeviceMesh(shape, ("data", "model"))
    layout_map = LayoutMap(mesh)
    layout_map[".*coder.*kernel"] = (None, "model")  # the gate columns split
    layout_map["head.kernel"] = ("model", None)
    set_distribution(ModelParallel(layout_map=layout_map, batch_dim_name="data"))
    sharded = seq2seq()
    sharded.set_weights(weights)
    set_distribution(None)
    h1 = single.fit([enc, dec], y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    h2 = sharded.fit([enc, dec], y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    np.testing.assert_allclose(h1.history["loss"], h2.history["loss"], rtol=1e-5)
    np.testing.assert_allclose(single.predict([enc, dec], verbose=0),
                               sharded.predict([enc, dec], verbose=0), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("suffix", [".h5", "_tfjs"])
def test_a_gru_saves_its_reset_after_for_readers_whose_default_differs(tmp_path, suffix):
    inp = keras.Input((5, 3))
    model = keras.Model(inp, layers.GRU(2, return_state=True, name="gru")(inp))
    path = str(tmp_path / f"gru{suffix}")
    model.save(path, **({"save_format": "tfjs"} if suffix == "_tfjs" else {}))
    x = data((2, 5, 3), 9)
    for a, b in zip(keras.models.load_model(path).predict(x, verbose=0),
                    model.predict(x, verbose=0)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
