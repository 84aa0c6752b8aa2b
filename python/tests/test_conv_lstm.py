"""keras.layers.ConvLSTM2D (keras/src/layers/rnn/conv_lstm.py, ConvLSTMCell),
built by the Keras layer table (src/io/keras/layers/recurrent.cc): its
outputs against a float64 NumPy ConvLSTM written here from Keras's cell
(direct loops over the windows), with 'same' and 'valid' padding, strides,
return_sequences, go_backwards, return_state and other activations; its
weight gradients against finite differences of that reference; training
sharded (AutoShard on model=2, data=2, data=2,model=2) equal to one device;
a .keras file round-trips it with Keras's weight paths."""

import zipfile

import numpy as np
import pytest

import autoshard.keras as keras
from autoshard.keras import layers

RNG = np.random.default_rng(23)
X = RNG.normal(size=(2, 3, 5, 4, 2)).astype(np.float32)  # [batch, time, rows, cols, channels]


def conv2d(x, w, stride, same, dilation=(1, 1)):
    """x [B, H, W, C], w [kh, kw, C, F]: TensorFlow's 'same' (odd zero after)."""
    B, H, W, C = x.shape
    kh, kw, _, F = w.shape
    span = [dilation[0] * (kh - 1) + 1, dilation[1] * (kw - 1) + 1]
    if same:
        out = [-(-H // stride[0]), -(-W // stride[1])]
        pad = [max((out[0] - 1) * stride[0] + span[0] - H, 0),
               max((out[1] - 1) * stride[1] + span[1] - W, 0)]
        x = np.pad(x, ((0, 0), (pad[0] // 2, pad[0] - pad[0] // 2),
                       (pad[1] // 2, pad[1] - pad[1] // 2), (0, 0)))
    else:
        out = [(H - span[0]) // stride[0] + 1, (W - span[1]) // stride[1] + 1]
    y = np.zeros((B, out[0], out[1], F))
    for i in range(out[0]):
        for j in range(out[1]):
            for a in range(kh):
                for b in range(kw):
                    patch = x[:, i * stride[0] + a * dilation[0], j * stride[1] + b * dilation[1]]
                    y[:, i, j] += patch @ w[a, b]
    return y


ACT = {"tanh": np.tanh, "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
       "relu": lambda v: np.maximum(v, 0), "hard_sigmoid": lambda v: np.clip(v / 6 + 0.5, 0, 1)}


def reference(x, kernel, recurrent, bias, stride=(1, 1), same=False, activation="tanh",
              recurrent_activation="sigmoid", return_sequences=False, go_backwards=False):
    """Keras's ConvLSTMCell.call in float64, over the steps of x."""
    x, kernel, recurrent = x.astype(np.float64), kernel.astype(np.float64), recurrent.astype(
        np.float64)
    F = recurrent.shape[2]
    act, ract = ACT[activation], ACT[recurrent_activation]
    h = c = None
    outs = []
    steps = range(x.shape[1])
    for t in (reversed(steps) if go_backwards else steps):
        z = conv2d(x[:, t], kernel, stride, same) + bias
        if h is None:
            h = c = np.zeros(z.shape[:3] + (F,))
        z = z + conv2d(h, recurrent, (1, 1), True)
        i, f, g, o = (z[..., k * F:(k + 1) * F] for k in range(4))
        c = ract(f) * c + ract(i) * act(g)
        h = ract(o) * act(c)
        outs.append(h)
    return (np.stack(outs, 1) if return_sequences else h), h, c


def weights_of(model, layer):
    w = {k.split(".")[-1]: v for k, v in zip(
        [p for p in model._built().weight_paths() if p.startswith(layer.name + ".")],
        [model._built().get_weight(p) for p in model._built().weight_paths()
         if p.startswith(layer.name + ".")])}
    return w["kernel"], w["recurrent_kernel"], w.get("bias", 0.0)


CASES = [
    dict(),
    dict(padding="same", return_sequences=True),
    dict(strides=2, padding="same", go_backwards=True, return_sequences=True),
    dict(activation="relu", recurrent_activation="hard_sigmoid", kernel_size=(2, 3)),
]


@pytest.mark.parametrize("case", CASES)
def test_outputs_match_numpy(case):
    case = dict(case)
    kernel_size = case.pop("kernel_size", 3)
    layer = layers.ConvLSTM2D(3, kernel_size, **case)
    model = keras.Sequential([keras.Input(X.shape[1:]), layer])
    kernel, recurrent, bias = weights_of(model, layer)
    s = case.get("strides", 1)
    want, _, _ = reference(X, kernel, recurrent, bias, stride=(s, s),
                           same=case.get("padding") == "same",
                           activation=case.get("activation", "tanh"),
                           recurrent_activation=case.get("recurrent_activation", "sigmoid"),
                           return_sequences=case.get("return_sequences", False),
                           go_backwards=case.get("go_backwards", False))
    got = model.predict(X, verbose=0)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_return_state_gives_h_and_c():
    inputs = keras.Input(X.shape[1:])
    layer = layers.ConvLSTM2D(3, 3, padding="same", return_state=True)
    out, h, c = layer(inputs)
    model = keras.Model(inputs, [out, h, c])
    kernel, recurrent, bias = weights_of(model, layer)
    want = reference(X, kernel, recurrent, bias, same=True)
    for got, w in zip(model.predict(X, verbose=0), want):
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-5)


def test_gradients_match_finite_differences():
    # d(sum(out * g))/d(weights) through one train_on_batch step of SGD at
    # rate 1: the change of each weight is minus its gradient.
    layer = layers.ConvLSTM2D(2, 2, padding="same", return_sequences=True)
    model = keras.Sequential([keras.Input((3, 3, 3, 2)), layer])
    x = RNG.normal(size=(2, 3, 3, 3, 2)).astype(np.float32)
    target = RNG.normal(size=(2, 3, 3, 3, 2)).astype(np.float32)
    model.compile(keras.optimizers.SGD(learning_rate=1.0), "mse")
    kernel, recurrent, bias = (np.array(w, np.float64) for w in weights_of(model, layer))
    n = target.size

    def loss(k, r, b):
        out, _, _ = reference(x, k, r, b, same=True, return_sequences=True)
        return ((out - target) ** 2).sum() / n

    model.train_on_batch(x, target)
    after = [np.array(w, np.float64) for w in weights_of(model, layer)]
    for which, (before, now) in enumerate(zip((kernel, recurrent, bias), after)):
        grad = before - now
        for idx in list(np.ndindex(before.shape))[::max(1, before.size // 6)]:
            eps = 1e-4
            plus, minus = [kernel.copy(), recurrent.copy(), bias.copy()], [
                kernel.copy(), recurrent.copy(), bias.copy()]
            plus[which][idx] += eps
            minus[which][idx] -= eps
            numeric = (loss(*plus) - loss(*minus)) / (2 * eps)
            assert abs(grad[idx] - numeric) < 1e-3 * max(1.0, abs(numeric)), (which, idx)


def _model(dropout=0.0, recurrent_dropout=0.0):
    drops = dict(dropout=dropout, recurrent_dropout=recurrent_dropout)
    # The masks are keyed by the model's seed and the layers' paths and seeds:
    # all the same in the models compared.
    if dropout or recurrent_dropout:
        keras.utils.set_random_seed(7)
    return keras.Sequential([
        keras.Input((4, 6, 6, 2)),
        layers.ConvLSTM2D(4, 3, padding="same", return_sequences=True, seed=5, name="first",
                          **drops),
        layers.ConvLSTM2D(2, 3, padding="same", seed=6, name="second", **drops),
        layers.Flatten(), layers.Dense(3)])


@pytest.mark.parametrize("shape", [(1, 2), (2, 1), (2, 2)])
@pytest.mark.parametrize("drops", [(0.0, 0.0), (0.3, 0.2)])
def test_training_sharded_equals_one_device(shape, drops):
    # With dropout: the masks are keyed by the layer's path and seed, the
    # same on every mesh, so training stays one device's.
    rng = np.random.default_rng(3)
    x = rng.normal(size=(8, 4, 6, 6, 2)).astype(np.float32)
    y = rng.integers(0, 3, size=8)
    single = _model(*drops)
    weights = single.get_weights()
    dist = keras.distribution.AutoShard(keras.distribution.DeviceMesh(shape, ("data", "model")),
                                        batch_dim_name="data")
    with dist.scope():
        sharded = _model(*drops)
    sharded.set_weights(weights)
    for m in (single, sharded):
        m.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    h1 = single.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    h2 = sharded.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    np.testing.assert_allclose(h1.history["loss"], h2.history["loss"], rtol=1e-5)
    assert h1.history["loss"][-1] < h1.history["loss"][0]
    np.testing.assert_allclose(single.predict(x, verbose=0), sharded.predict(x, verbose=0),
                               rtol=1e-4, atol=1e-6)
    for a, b in zip(single.get_weights(), sharded.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("drops", [(0.4, 0.0), (0.0, 0.4)])
def test_dropout_acts_in_training_only(drops):
    # A step of SGD at a negligible rate keeps the weights and reports the
    # training loss (before its update): with dropout (input or recurrent) it is not the
    # inference loss; predict and evaluate are the dropout-free model's.
    rng = np.random.default_rng(8)
    x = rng.normal(size=(4, 4, 6, 6, 2)).astype(np.float32)
    y = rng.integers(0, 3, size=4)
    plain, dropping = _model(), _model(*drops)
    dropping.set_weights(plain.get_weights())
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    for m in (plain, dropping):
        m.compile(keras.optimizers.SGD(learning_rate=1e-12), loss)
    np.testing.assert_array_equal(dropping.predict(x, verbose=0), plain.predict(x, verbose=0))
    inference = plain.evaluate(x, y, verbose=0)
    assert dropping.evaluate(x, y, verbose=0) == pytest.approx(inference, rel=1e-6)
    np.testing.assert_allclose(plain.train_on_batch(x, y), inference, rtol=1e-5)
    trained = [float(dropping.train_on_batch(x, y)) for _ in range(2)]
    assert abs(trained[0] - inference) > 1e-3 * abs(inference)
    assert trained[0] != trained[1]  # new masks for each batch


def test_keras_file_round_trip(tmp_path):
    model = _model()
    model.save(tmp_path / "m.keras")
    with zipfile.ZipFile(tmp_path / "m.keras") as z:
        z.extract("model.weights.h5", tmp_path)
    from autoshard import _native
    saved = dict(_native.read_weights_h5(str(tmp_path / "model.weights.h5")))
    # Keras 3's saving_lib names the groups by class (to_snake_case), the
    # variables under the layer's cell.
    for group, channels in (("conv_lstm2d", 4), ("conv_lstm2d_1", 2)):
        assert {k for k in saved if k.startswith(f"layers/{group}/")} == {
            f"layers/{group}/cell/vars/{i}" for i in range(3)}
        assert saved[f"layers/{group}/cell/vars/1"].shape == (3, 3, channels, 4 * channels)
    again = keras.models.load_model(tmp_path / "m.keras")
    x = np.random.default_rng(4).normal(size=(2, 4, 6, 6, 2)).astype(np.float32)
    np.testing.assert_array_equal(again.predict(x, verbose=0), model.predict(x, verbose=0))


def test_refusals_name_the_option():
    with pytest.raises(ValueError, match="stateful"):
        layers.ConvLSTM2D(2, 3, stateful=True)
    with pytest.raises(ValueError, match="channels_last"):
        layers.ConvLSTM2D(2, 3, data_format="channels_first")
    with pytest.raises(ValueError, match="dropout"):
        layers.ConvLSTM2D(2, 3, dropout=1.0)
    with pytest.raises(ValueError, match="recurrent_dropout"):
        layers.ConvLSTM2D(2, 3, recurrent_dropout=-0.1)


@pytest.mark.parametrize("case", [dict(kernel=3, same=True), dict(kernel=2, stride=2),
                                  dict(kernel=3, backwards=True, sequences=True)])
def test_conv_lstm1d_is_the_2d_cell_over_rows_of_height_one(case):
    """ConvLSTM1D (keras/src/layers/rnn/conv_lstm1d.py) against the float64
    reference of the 2-D cell on images of height one, with its kernels
    [k, in, 4F] as [1, k, in, 4F]."""
    rng = np.random.default_rng(7)
    k, stride = case["kernel"], case.get("stride", 1)
    x = rng.standard_normal((2, 4, 9, 3)).astype(np.float32)
    layer = keras.layers.ConvLSTM1D(5, k, strides=stride,
                                    padding="same" if case.get("same") else "valid",
                                    return_sequences=case.get("sequences", False),
                                    go_backwards=case.get("backwards", False), name="cl1")
    model = keras.Sequential([keras.Input((4, 9, 3)), layer])
    kernel, recurrent, bias = layer.get_weights()
    assert kernel.shape == (k, 3, 20) and recurrent.shape == (k, 5, 20)
    want, _, _ = reference(x[:, :, None], kernel[None], recurrent[None], bias, (1, stride),
                           case.get("same", False), return_sequences=case.get("sequences", False),
                           go_backwards=case.get("backwards", False))
    got = model.predict(x, verbose=0)
    np.testing.assert_allclose(got, want[:, :, 0] if case.get("sequences") else want[:, 0],
                               rtol=1e-4, atol=1e-5)


def trains_sharded_as_one_device_and_round_trips(make, x, y, batch_size, path):
    """make()'s model trained on one device, data=1,model=2 and data=2,model=2
    (AutoShard) gives the same losses, and a .keras file of it predicts alike."""
    single = make()
    weights = single.get_weights()
    runs = []
    for shape in (None, (1, 2), (2, 2)):
        model = single
        if shape:
            dist = keras.distribution.AutoShard(
                keras.distribution.DeviceMesh(shape, ("data", "model")), batch_dim_name="data")
            with dist.scope():
                model = make()
            model.set_weights(weights)
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        runs.append(model.fit(x, y, epochs=2, batch_size=batch_size, shuffle=False,
                              verbose=0).history["loss"])
    assert runs[0][-1] < runs[0][0]
    for r in runs[1:]:
        np.testing.assert_allclose(r, runs[0], rtol=1e-5)
    model.save(path)
    again = keras.models.load_model(path)
    np.testing.assert_allclose(again.predict(x, verbose=0), model.predict(x, verbose=0),
                               rtol=1e-5, atol=1e-6)


def test_conv_lstm1d_trains_sharded_as_one_device_and_round_trips(tmp_path):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((8, 3, 7, 2)).astype(np.float32)
    y = rng.standard_normal((8, 7, 4)).astype(np.float32)

    def make():
        return keras.Sequential([keras.Input((3, 7, 2)),
                                 keras.layers.ConvLSTM1D(4, 3, padding="same", name="c")])

    trains_sharded_as_one_device_and_round_trips(make, x, y, 4, tmp_path / "c1.keras")


def conv3d(x, w, stride, same):
    """x [B, D, H, W, C], w [kd, kh, kw, C, F], TensorFlow's 'same' padding
    (the odd zero after), by the kernel's taps."""
    k = w.shape[:3]
    size = x.shape[1:4]
    if same:
        out = [-(-n // s) for n, s in zip(size, stride)]
        pad = [max((o - 1) * s + kk - n, 0) for o, s, kk, n in zip(out, stride, k, size)]
        x = np.pad(x, [(0, 0)] + [(p // 2, p - p // 2) for p in pad] + [(0, 0)])
    else:
        out = [(n - kk) // s + 1 for n, kk, s in zip(size, k, stride)]
    y = np.zeros((x.shape[0], *out, w.shape[-1]))
    for a in range(k[0]):
        for b in range(k[1]):
            for c in range(k[2]):
                patch = x[:, a:a + stride[0] * out[0]:stride[0],
                          b:b + stride[1] * out[1]:stride[1],
                          c:c + stride[2] * out[2]:stride[2]]
                y += patch @ w[a, b, c]
    return y


def reference3d(x, kernel, recurrent, bias, stride, same, return_sequences, go_backwards):
    """Keras's ConvLSTMCell.call with 3-D convolutions, in float64."""
    x, kernel, recurrent = (v.astype(np.float64) for v in (x, kernel, recurrent))
    F = recurrent.shape[-2]
    sig = ACT["sigmoid"]
    h = c = None
    outs = []
    steps = range(x.shape[1])
    for t in (reversed(steps) if go_backwards else steps):
        z = conv3d(x[:, t], kernel, stride, same) + bias
        if h is None:
            h = c = np.zeros(z.shape[:4] + (F,))
        z = z + conv3d(h, recurrent, (1, 1, 1), True)
        i, f, g, o = (z[..., k * F:(k + 1) * F] for k in range(4))
        c = sig(f) * c + sig(i) * np.tanh(g)
        h = sig(o) * np.tanh(c)
        outs.append(h)
    return np.stack(outs, 1) if return_sequences else h


@pytest.mark.parametrize("case", [dict(kernel=(2, 3, 3)),
                                  dict(kernel=3, same=True, sequences=True),
                                  dict(kernel=(1, 2, 2), stride=(1, 2, 2), same=True,
                                       backwards=True)])
def test_conv_lstm3d_matches_a_float64_3d_reference(case):
    """ConvLSTM3D (keras/src/layers/rnn/conv_lstm3d.py) against ConvLSTMCell
    written here with direct 3-D convolutions; kernels [kd, kh, kw, in, 4F]."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 3, 4, 5, 4, 2)).astype(np.float32)
    k = case["kernel"]
    stride = case.get("stride", (1, 1, 1))
    same = case.get("same", False)
    layer = keras.layers.ConvLSTM3D(3, k, strides=stride, padding="same" if same else "valid",
                                    return_sequences=case.get("sequences", False),
                                    go_backwards=case.get("backwards", False), name="cl3")
    model = keras.Sequential([keras.Input(x.shape[1:]), layer])
    kernel, recurrent, bias = layer.get_weights()
    kd, kh, kw = (k, k, k) if isinstance(k, int) else k
    assert kernel.shape == (kd, kh, kw, 2, 12) and recurrent.shape == (kd, kh, kw, 3, 12)
    bias = bias + rng.normal(scale=0.1, size=bias.shape).astype(np.float32)
    model.set_weights([kernel, recurrent, bias])
    want = reference3d(x, kernel, recurrent, bias, stride, same,
                       case.get("sequences", False), case.get("backwards", False))
    got = model.predict(x, verbose=0)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_conv_lstm3d_trains_sharded_as_one_device_and_round_trips(tmp_path):
    rng = np.random.default_rng(10)
    x = rng.standard_normal((4, 2, 3, 4, 4, 2)).astype(np.float32)
    y = rng.standard_normal((4, 3, 4, 4, 3)).astype(np.float32)

    def make():
        return keras.Sequential([keras.Input((2, 3, 4, 4, 2)),
                                 keras.layers.ConvLSTM3D(3, 2, padding="same", name="c")])

    trains_sharded_as_one_device_and_round_trips(make, x, y, 2, tmp_path / "c3.keras")
