"""Keras's 3-D layers (issue 57): Conv3D, MaxPooling3D, AveragePooling3D,
GlobalMaxPooling3D, GlobalAveragePooling3D, UpSampling3D, ZeroPadding3D and
Cropping3D, built by the Keras layer table (src/io/keras/layers/), against
float64 NumPy written here as loops over each output position's window
(keras/src/layers/convolutional/base_conv.py and pooling/base_pooling.py:
strides, dilation, groups, TensorFlow's 'same' padding with the odd zero
after, an average over the positions inside the input); their gradients
against finite differences of that NumPy; trained sharded (model=2,
data=2, data=2,model=2) as on one device; saved and loaded. TensorFlow.js's
own Conv3D/MaxPooling3D/AveragePooling3D are checked in C++
(tests/keras_layers_reference_test.cc, keras_files_test.cc; fixtures
conv3d_*, average_pooling3d_valid, volume_cnn)."""

import json
import zipfile

import numpy as np
import pytest

import autoshard.keras as keras
from autoshard.keras import layers
from autoshard.keras.distribution import (AutoShard, DeviceMesh, LayoutMap, ModelParallel,
                                          set_distribution)

RNG = np.random.default_rng(57)


def _padding(extents, windows, strides, dilations, padding):
    """Per spatial dim: (output extent, zeros before) as TensorFlow pads."""
    out = []
    for n, k, s, d in zip(extents, windows, strides, dilations):
        span = d * (k - 1) + 1
        if padding == "same":
            o = -(-n // s)
            out.append((o, max(0, (o - 1) * s + span - n) // 2))
        else:
            out.append(((n - span) // s + 1, 0))
    return out


def conv3d_reference(x, kernel, bias, strides=(1, 1, 1), padding="valid",
                     dilation=(1, 1, 1), groups=1):
    """A loop over the kernel's taps: each tap reads, for every output
    position p, the input at p * stride + tap * dilation (zeros before and
    after as 'same' pads), times its [in/groups, filters] matrix per group."""
    x, kernel = x.astype(np.float64), kernel.astype(np.float64)
    b, *extents, c = x.shape
    *k, cg, f = kernel.shape
    assert cg * groups == c
    geometry = _padding(extents, k, strides, dilation, padding)
    outs = [o for o, _ in geometry]
    x = np.pad(x, [(0, 0)] + [(lo, max(0, (o - 1) * s + d * (kk - 1) + 1 - n - lo))
                              for (o, lo), s, d, kk, n in zip(geometry, strides, dilation, k,
                                                               extents)] + [(0, 0)])
    fg = f // groups
    y = np.zeros((b, *outs, f))
    for tap in np.ndindex(*k):
        v = x[(slice(None), *[slice(t * d, t * d + s * (o - 1) + 1, s) for t, d, s, o in
                              zip(tap, dilation, strides, outs)])]
        for g in range(groups):
            y[..., g * fg:(g + 1) * fg] += v[..., g * cg:(g + 1) * cg] @ kernel[tap][
                :, g * fg:(g + 1) * fg]
    return y + (0 if bias is None else bias.astype(np.float64))


def pool3d_reference(x, pool, strides, padding, reduce):
    x = x.astype(np.float64)
    b, *extents, c = x.shape
    geometry = _padding(extents, pool, strides, (1, 1, 1), padding)
    y = np.zeros((b, *[o for o, _ in geometry], c))
    for pos in np.ndindex(*y.shape[1:4]):
        box = tuple(slice(max(0, p * s - lo), min(n, p * s - lo + k)) for p, s, k, n, (_, lo)
                    in zip(pos, strides, pool, extents, geometry))
        y[(slice(None), *pos)] = reduce(x[(slice(None), *box)], axis=(1, 2, 3))
    return y


def _model(layer, shape):
    return keras.Sequential([keras.Input(shape), layer])


CONVS = [  # (input shape, Conv3D arguments)
    ((5, 6, 7, 2), dict(filters=4, kernel_size=(2, 3, 2), strides=(2, 1, 2), padding="same")),
    ((4, 5, 6, 3), dict(filters=3, kernel_size=(3, 2, 3))),
    ((6, 5, 7, 4), dict(filters=6, kernel_size=2, dilation_rate=(2, 1, 3), padding="same",
                        groups=2)),
    ((7, 4, 5, 2), dict(filters=2, kernel_size=(3, 1, 2), dilation_rate=(3, 2, 1))),
    ((5, 5, 5, 3), dict(filters=3, kernel_size=3, strides=3, padding="same", use_bias=False)),
]


@pytest.mark.parametrize("shape,args", CONVS, ids=[str(i) for i in range(len(CONVS))])
def test_conv3d_equals_numpy_loops(shape, args):
    model = _model(layers.Conv3D(**args), shape)
    weights = [RNG.normal(size=w.shape).astype(np.float32) for w in model.get_weights()]
    model.set_weights(weights)
    x = RNG.normal(size=(3, *shape)).astype(np.float32)
    got = model.predict(x, verbose=0)
    k = args["kernel_size"]
    assert weights[0].shape == (*(k if isinstance(k, tuple) else (k,) * 3),
                                shape[-1] // args.get("groups", 1), args["filters"])
    want = conv3d_reference(
        x, weights[0], weights[1] if len(weights) > 1 else None,
        strides=np.broadcast_to(args.get("strides", 1), 3), padding=args.get("padding", "valid"),
        dilation=np.broadcast_to(args.get("dilation_rate", 1), 3), groups=args.get("groups", 1))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


POOLS = [  # (class, arguments, NumPy reduction)
    (layers.MaxPooling3D, dict(pool_size=(2, 3, 2), strides=(2, 2, 1), padding="same"), np.max),
    (layers.MaxPooling3D, dict(), np.max),
    (layers.AveragePooling3D, dict(pool_size=(3, 2, 2), strides=(2, 1, 3), padding="same"),
     np.mean),
    (layers.AveragePooling3D, dict(pool_size=(2, 2, 3), strides=(1, 2, 2)), np.mean),
]


@pytest.mark.parametrize("cls,args,reduce", POOLS, ids=[str(i) for i in range(len(POOLS))])
def test_pooling3d_equals_numpy_loops(cls, args, reduce):
    x = RNG.normal(size=(2, 5, 6, 7, 3)).astype(np.float32)
    got = _model(cls(**args), (5, 6, 7, 3)).predict(x, verbose=0)
    pool = np.broadcast_to(args.get("pool_size", 2), 3)
    strides = np.broadcast_to(args.get("strides", pool), 3)
    want = pool3d_reference(x, pool, strides, args.get("padding", "valid"), reduce)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def pool3d_input_gradient(z, dy, pool, strides, padding, is_max):
    """The gradient of the pooling of z given its output's dy: each window's
    dy to its maximum (the first in row-major order) or spread evenly over
    its positions inside z."""
    b, *extents, c = z.shape
    geometry = _padding(extents, pool, strides, (1, 1, 1), padding)
    dz = np.zeros(z.shape)
    for pos in np.ndindex(*dy.shape[1:4]):
        box = tuple(slice(max(0, p * s - lo), min(n, p * s - lo + k)) for p, s, k, n, (_, lo)
                    in zip(pos, strides, pool, extents, geometry))
        for i, ch in np.ndindex(b, c):
            window = z[(i, *box, ch)]
            g = dy[(i, *pos, ch)]
            if is_max:
                at = np.unravel_index(np.argmax(window), window.shape)
                dz[(i, *[bx.start + a for bx, a in zip(box, at)], ch)] += g
            else:
                dz[(i, *box, ch)] += g / window.size
    return dz


@pytest.mark.parametrize("cls,args,reduce", POOLS, ids=[str(i) for i in range(len(POOLS))])
def test_pooling3d_gradients_equal_numpy(cls, args, reduce):
    """A 1x1x1 Conv3D before the pooling: one SGD step of rate 1 moves its
    kernel by x^T dz, dz the pooling's input gradient computed in NumPy.
    (TensorFlow.js 4.22's own MaxPooling3D gradient loses part of dy unless
    its windows tile the input, docs/layers.md: its fixture is volume_cnn's
    2x2x2 pooling of 6x6x6.)"""
    model = keras.Sequential([keras.Input((5, 6, 7, 3)), layers.Conv3D(4, 1, use_bias=False),
                              cls(**args)])
    model.compile(keras.optimizers.SGD(learning_rate=1.0), "mse")
    kernel = RNG.normal(size=(1, 1, 1, 3, 4)).astype(np.float32)
    model.set_weights([kernel])
    x = RNG.normal(size=(2, 5, 6, 7, 3)).astype(np.float32)
    pool = np.broadcast_to(args.get("pool_size", 2), 3)
    strides = np.broadcast_to(args.get("strides", pool), 3)
    padding = args.get("padding", "valid")
    z = x.astype(np.float64) @ kernel[0, 0, 0].astype(np.float64)
    out = pool3d_reference(z, pool, strides, padding, reduce)
    y = RNG.normal(size=out.shape).astype(np.float32)
    dz = pool3d_input_gradient(z, 2 * (out - y) / y.size, pool, strides, padding,
                               reduce is np.max)
    want = np.einsum("bdhwi,bdhwo->io", x.astype(np.float64), dz)
    model.train_on_batch(x, y)
    np.testing.assert_allclose(kernel[0, 0, 0] - model.get_weights()[0][0, 0, 0], want,
                               rtol=1e-4, atol=1e-6)


def test_global_pooling_and_reshaping_layers_equal_numpy():
    x = RNG.normal(size=(2, 4, 5, 3, 2)).astype(np.float32)
    cases = [
        (layers.GlobalMaxPooling3D(), x.max(axis=(1, 2, 3))),
        (layers.GlobalAveragePooling3D(), x.mean(axis=(1, 2, 3))),
        (layers.GlobalMaxPooling3D(keepdims=True), x.max(axis=(1, 2, 3), keepdims=True)),
        (layers.GlobalAveragePooling3D(keepdims=True), x.mean(axis=(1, 2, 3), keepdims=True)),
        (layers.UpSampling3D((2, 1, 3)), x.repeat(2, axis=1).repeat(3, axis=3)),
        (layers.UpSampling3D(), x.repeat(2, axis=1).repeat(2, axis=2).repeat(2, axis=3)),
        (layers.ZeroPadding3D(((1, 0), (2, 1), (0, 3))),
         np.pad(x, ((0, 0), (1, 0), (2, 1), (0, 3), (0, 0)))),
        (layers.ZeroPadding3D((1, 0, 2)), np.pad(x, ((0, 0), (1, 1), (0, 0), (2, 2), (0, 0)))),
        (layers.ZeroPadding3D(), np.pad(x, ((0, 0), (1, 1), (1, 1), (1, 1), (0, 0)))),
        (layers.Cropping3D(((1, 2), (0, 3), (1, 0))), x[:, 1:-2, :-3, 1:]),
        (layers.Cropping3D((1, 2, 1)), x[:, 1:-1, 2:-2, 1:-1]),
    ]
    for layer, want in cases:
        got = _model(layer, x.shape[1:]).predict(x, verbose=0)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=layer.name)


def _loss64(weights, x, y, convs):
    h = x
    for (kernel, bias), args in zip(weights, convs):
        h = conv3d_reference(h, kernel, bias, **args)
    return np.mean((h - y) ** 2)


def test_gradients_equal_finite_differences_of_numpy():
    """Two Conv3Ds (dilation and groups, then strides and 'same'): one SGD
    step of rate 1 moves each weight by its gradient, compared with central
    differences of the float64 NumPy loss (the second layer's input
    gradient is in the first one's kernel gradient)."""
    convs = [dict(dilation=(2, 1, 1), padding="same", groups=2),
             dict(strides=(2, 1, 2), padding="same")]
    model = keras.Sequential([
        keras.Input((5, 4, 5, 4)),
        layers.Conv3D(4, (2, 2, 2), dilation_rate=(2, 1, 1), padding="same", groups=2),
        layers.Conv3D(3, (2, 3, 2), strides=(2, 1, 2), padding="same")])
    model.compile(keras.optimizers.SGD(learning_rate=1.0), "mse")
    start = [RNG.normal(size=w.shape).astype(np.float32) * 0.5 for w in model.get_weights()]
    model.set_weights(start)
    x = RNG.normal(size=(2, 5, 4, 5, 4)).astype(np.float32)
    y = RNG.normal(size=model.predict(x, verbose=0).shape).astype(np.float32)
    model.train_on_batch(x, y)
    moved = [a - b for a, b in zip(start, model.get_weights())]
    pairs = [[w.astype(np.float64) for w in start[i:i + 2]] for i in (0, 2)]
    eps = 1e-5
    for layer in range(2):
        for part in range(2):
            want = np.zeros_like(pairs[layer][part])
            for i in np.ndindex(want.shape):
                losses = []
                for sign in (1, -1):
                    trial = [[w.copy() for w in p] for p in pairs]
                    trial[layer][part][i] += sign * eps
                    losses.append(_loss64(trial, x, y, convs))
                want[i] = (losses[0] - losses[1]) / (2 * eps)
            np.testing.assert_allclose(moved[2 * layer + part], want, rtol=1e-3, atol=1e-4,
                                       err_msg=f"layer {layer} weight {part}")


def test_regularizers_and_constraints_as_conv2ds():
    """Conv3D takes Conv2D's kernel_/bias_ regularizers and constraints
    (base_conv.py): the L2 penalty is in the loss and model.losses, and
    NonNeg holds after a step."""
    from autoshard.keras import constraints, regularizers

    model = keras.Sequential([keras.Input((4, 4, 4, 2)), layers.Conv3D(
        3, 2, kernel_regularizer=regularizers.L2(0.05), bias_constraint=constraints.NonNeg())])
    model.compile(keras.optimizers.SGD(learning_rate=0.5), "mse")
    weights = [RNG.normal(size=w.shape).astype(np.float32) for w in model.get_weights()]
    weights[1] = -1 - np.abs(weights[1])  # negative: the constraint must act
    model.set_weights(weights)
    x = RNG.normal(size=(2, 4, 4, 4, 2)).astype(np.float32)
    y = RNG.normal(size=(2, 3, 3, 3, 3)).astype(np.float32)
    penalty = 0.05 * np.sum(weights[0].astype(np.float64) ** 2)
    want = np.mean((conv3d_reference(x, *weights) - y) ** 2) + penalty
    assert model.evaluate(x, y, verbose=0) == pytest.approx(want, rel=1e-5)
    np.testing.assert_allclose(model.losses, [penalty], rtol=1e-5)
    model.train_on_batch(x, y)
    assert np.all(model.get_weights()[1] >= 0)


def _volume_model():
    keras.utils.set_random_seed(3)
    model = keras.Sequential([
        keras.Input((6, 6, 5, 2)),
        layers.ZeroPadding3D(((1, 0), (0, 1), (1, 1)), name="pad"),
        layers.Conv3D(6, 3, padding="same", activation="relu", name="conv_a"),
        layers.MaxPooling3D((2, 2, 2), padding="same", name="max"),
        layers.Conv3D(5, (2, 2, 2), dilation_rate=(1, 1, 2), padding="same", groups=1,
                      name="conv_b"),
        layers.UpSampling3D((1, 2, 1), name="up"),
        layers.Cropping3D(((0, 1), (1, 1), (0, 0)), name="crop"),
        layers.AveragePooling3D((2, 2, 2), strides=1, padding="same", name="avg"),
        layers.GlobalAveragePooling3D(name="gap"),
        layers.Dense(3, name="head")])
    model.compile(keras.optimizers.SGD(learning_rate=0.02), "mse")
    return model


def _layout(mesh):
    layout_map = LayoutMap(mesh)
    layout_map["conv_.*kernel"] = (None, None, None, None, "model")  # filters split
    layout_map["head.*kernel"] = ("model", None)
    return ModelParallel(layout_map=layout_map, batch_dim_name="data")


MESHES = [((1, 2), "model=2"), ((2, 1), "data=2"), ((2, 2), "data=2,model=2")]


@pytest.mark.parametrize("plan", ["autoshard", "layout"])
@pytest.mark.parametrize("shape,mesh_name", MESHES, ids=[m for _, m in MESHES])
def test_training_sharded_equals_one_device(shape, mesh_name, plan):
    rng = np.random.default_rng(11)
    x = rng.normal(size=(6, 6, 6, 5, 2)).astype(np.float32)
    y = rng.normal(size=(6, 3)).astype(np.float32)
    single = _volume_model()
    mesh = DeviceMesh(shape, ("data", "model"))
    set_distribution(AutoShard(mesh, batch_dim_name="data") if plan == "autoshard"
                     else _layout(mesh))
    try:
        sharded = _volume_model()
    finally:
        set_distribution(None)
    sharded.set_weights(single.get_weights())
    h1 = single.fit(x, y, batch_size=3, epochs=2, shuffle=False, verbose=0).history["loss"]
    h2 = sharded.fit(x, y, batch_size=3, epochs=2, shuffle=False, verbose=0).history["loss"]
    np.testing.assert_allclose(h2, h1, rtol=1e-5)
    assert h1[-1] < h1[0]  # it learns
    np.testing.assert_allclose(sharded.predict(x, verbose=0), single.predict(x, verbose=0),
                               rtol=1e-4, atol=1e-6)
    for a, b in zip(single.get_weights(), sharded.get_weights()):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("ext", [".keras", ".h5"])
def test_a_saved_file_loads_with_its_config_and_weights(tmp_path, ext):
    model = _volume_model()
    path = tmp_path / f"volume{ext}"
    model.save(path)
    loaded = keras.models.load_model(path)
    x = RNG.normal(size=(2, 6, 6, 5, 2)).astype(np.float32)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0),
                               rtol=1e-6, atol=1e-7)
    if ext == ".keras":  # Keras 3's classes and fields, as Keras would read them
        with zipfile.ZipFile(path) as z:
            config = json.loads(z.read("config.json"))
        entries = config["config"]["layers"]
        assert [e["class_name"] for e in entries if e["class_name"] != "InputLayer"] == [
            type(layer).__name__ for layer in model.layers]
        conv_b = next(e["config"] for e in entries if e["config"]["name"] == "conv_b")
        assert conv_b["kernel_size"] == [2, 2, 2] and conv_b["dilation_rate"] == [1, 1, 2]


def test_unsupported_options_are_one_line_errors_naming_layer_and_option():
    with pytest.raises(ValueError, match="Conv3D: only data_format='channels_last'"):
        layers.Conv3D(2, 3, data_format="channels_first")
    with pytest.raises(ValueError, match="Conv3D.*padding.*causal"):
        layers.Conv3D(2, 3, padding="causal")
    with pytest.raises(ValueError, match="Conv3D.*strides > 1 together with dilation_rate"):
        layers.Conv3D(2, 3, strides=(1, 2, 1), dilation_rate=(1, 2, 1))
    with pytest.raises(ValueError, match="Conv3D.*kernel_size must be an integer or 3"):
        layers.Conv3D(2, (3, 3))
    with pytest.raises(ValueError, match="MaxPooling3D: only data_format='channels_last'"):
        layers.MaxPooling3D(data_format="channels_first")
    with pytest.raises(ValueError, match="AveragePooling3D.*padding.*full"):
        layers.AveragePooling3D(padding="full")
    with pytest.raises(ValueError, match="GlobalMaxPooling3D: only data_format='channels_last'"):
        layers.GlobalMaxPooling3D(data_format="channels_first")
    with pytest.raises(ValueError, match="Cropping3D.*3 ints or 3 pairs"):
        layers.Cropping3D(((1, 1), (1, 1)))
    with pytest.raises(ValueError, match="Conv3D.*groups"):
        _model(layers.Conv3D(4, 2, groups=3), (4, 4, 4, 3))
    model = _model(layers.Cropping3D(((2, 2), (0, 0), (0, 0))), (4, 3, 3, 1))
    with pytest.raises(ValueError, match="Cropping3D.*leaves nothing"):
        model.predict(np.zeros((1, 4, 3, 3, 1), np.float32), verbose=0)
    with pytest.raises(ValueError, match="Conv3D.*needs \\[batch, depth, rows, cols, channels\\]"):
        _model(layers.Conv3D(2, 2), (4, 4, 3)).predict(np.zeros((1, 4, 4, 3), np.float32),
                                                       verbose=0)


def test_max_pooling3d_same_gradient_equals_finite_differences_of_numpy():
    """MaxPooling3D with 'same' padding (the TF.js fixture's shape, whose
    TF.js input gradient disagrees): a 1x1x1 Conv3D before it, so the
    kernel's gradient sums the pooling's input gradient; one SGD step of
    rate 1 against central differences of a NumPy pooling (padding -inf)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5, 6, 7, 2)).astype(np.float32)
    y = rng.normal(size=(2, 3, 3, 7, 2)).astype(np.float32)

    def pooled(h):  # depth window 2 stride 2, rows 3 stride 2, cols 2 stride 1
        hp = np.pad(h, ((0, 0), (0, 1), (0, 1), (0, 1), (0, 0)), constant_values=-np.inf)
        out = np.zeros((2, 3, 3, 7, 2))
        for d in range(3):
            for r in range(3):
                for c in range(7):
                    out[:, d, r, c] = hp[:, 2 * d:2 * d + 2, 2 * r:2 * r + 3,
                                         c:c + 2].max(axis=(1, 2, 3))
        return out

    model = keras.Sequential([
        keras.Input((5, 6, 7, 2)), layers.Conv3D(2, 1, use_bias=False),
        layers.MaxPooling3D((2, 3, 2), strides=(2, 2, 1), padding="same")])
    model.compile(keras.optimizers.SGD(1.0), "mse")
    w0 = rng.normal(size=(1, 1, 1, 2, 2)).astype(np.float32)
    model.set_weights([w0])
    np.testing.assert_allclose(model.predict(x, verbose=0), pooled(x @ w0[0, 0, 0]),
                               rtol=1e-5, atol=1e-6)
    model.train_on_batch(x, y)
    moved = w0 - model.get_weights()[0]

    def loss(w):
        return ((pooled(x.astype(np.float64) @ w[0, 0, 0]) - y) ** 2).mean()

    want = np.zeros(w0.shape)
    for i in np.ndindex(w0.shape):
        up, down = w0.astype(np.float64), w0.astype(np.float64)
        up[i] += 1e-5
        down[i] -= 1e-5
        want[i] = (loss(up) - loss(down)) / 2e-5
    np.testing.assert_allclose(moved, want, rtol=1e-4, atol=1e-6)
