"""Keras 3's random augmentation layers inside models (issue 57): active in
fit only, identity in predict and evaluate, seeded, a new draw each step,
and the same draws on every mesh (sharded training equals one device's)."""

import numpy as np
import pytest

import autoshard.keras as keras

MESHES = [((3,), ("model",)), ((2, 2), ("data", "model"))]


def _trains_alike(make, x, y, mesh):
    """fit's losses of make() on ``mesh`` equal one device's (same weights)."""
    one = make(1)
    shape, axes = mesh
    distribution = keras.distribution.AutoShard(
        keras.distribution.DeviceMesh(shape, axes),
        batch_dim_name="data" if "data" in axes else None)
    with distribution.scope():
        sharded = make(1)
    sharded.set_weights(one.get_weights())  # layer names (and so draws) differ
    h1 = one.fit(x, y, batch_size=4, epochs=3, shuffle=False, verbose=0).history["loss"]
    h2 = sharded.fit(x, y, batch_size=4, epochs=3, shuffle=False, verbose=0).history["loss"]
    np.testing.assert_allclose(h2, h1, rtol=1e-4)


def _image(seed=0, shape=(3, 4, 2)):
    return np.random.default_rng(seed).normal(size=(1,) + shape).astype("float32") * 10 + 50


def _probe(layer, shape):
    """A model whose mse against its own (flattened) input is the layer's
    change: identity Dense, a learning rate too small to move it (each step
    sees the layer anew)."""
    n = int(np.prod(shape))
    model = keras.Sequential([keras.Input(shape), layer, keras.layers.Flatten(),
                              keras.layers.Dense(n, use_bias=False)])
    model.set_weights([np.eye(n, dtype="float32")])
    model.compile(keras.optimizers.SGD(1e-30), "mse")
    return model


def _step_losses_of(model, x, y, steps):
    return np.asarray(model.fit(x, y, batch_size=len(x), epochs=steps, shuffle=False,
                                verbose=0).history["loss"])


def _step_losses(model, x, steps=24):
    return _step_losses_of(model, x, x.reshape(len(x), -1), steps)


@pytest.mark.parametrize("mode,axes", [("horizontal", (2,)), ("vertical", (1,)),
                                       ("horizontal_and_vertical", (1, 2))])
def test_random_flip_flips_in_training_only(mode, axes):
    x = _image()
    model = _probe(keras.layers.RandomFlip(mode, seed=3), x.shape[1:])
    np.testing.assert_array_equal(model.predict(x, verbose=0), x.reshape(1, -1))
    assert model.evaluate(x, x.reshape(1, -1), verbose=0) == 0
    # Each step's image is one of the flips Keras can draw.
    flips = [x, np.flip(x, 2), np.flip(x, 1), np.flip(x, (1, 2))]
    allowed = {0: [0], 1: [0, 2], 2: [0, 1], 3: [0, 1, 2, 3]}[sum(1 << (a - 1) for a in axes)]
    possible = np.array([np.mean((flips[i] - x) ** 2) for i in allowed])
    losses = _step_losses(model, x)
    nearest = np.abs(losses[:, None] - possible[None, :]).min(axis=1)
    assert nearest.max() < 1e-3 * possible.max()
    assert len({int(np.argmin(np.abs(loss - possible))) for loss in losses}) == len(allowed)
    # The same seed draws the same flips; another seed others.
    again = _step_losses(_probe(keras.layers.RandomFlip(mode, seed=3), x.shape[1:]), x)
    np.testing.assert_array_equal(again, losses)
    other = _step_losses(_probe(keras.layers.RandomFlip(mode, seed=4), x.shape[1:]), x)
    assert not np.array_equal(other, losses)


def test_random_contrast_draws_factors_in_range():
    x = _image(1)
    model = _probe(keras.layers.RandomContrast(0.3, value_range=(-1e6, 1e6), seed=5),
                   x.shape[1:])
    np.testing.assert_array_equal(model.predict(x, verbose=0), x.reshape(1, -1))
    # (x - mean) * f + mean - x = (f - 1) (x - mean), the mean per image and channel.
    spread = np.mean((x - x.mean(axis=(1, 2), keepdims=True)) ** 2)
    change = np.sqrt(_step_losses(model, x) / spread)  # |f - 1|
    assert change.max() <= 0.3 + 1e-4 and change.max() > 0.15 and len(set(change)) > 20
    clipped = _probe(keras.layers.RandomContrast(0.3, value_range=(0, 255), seed=5),
                     x.shape[1:])
    assert np.all(np.isfinite(_step_losses(clipped, x, 4)))


def test_random_crop_takes_one_window_per_batch_in_training():
    x = np.concatenate([_image(2, (6, 5, 1)), _image(3, (6, 5, 1))])
    layer = keras.layers.RandomCrop(3, 2, seed=7)
    model = keras.Sequential([keras.Input((6, 5, 1)), layer, keras.layers.Flatten(),
                              keras.layers.Dense(6, use_bias=False)])
    model.set_weights([np.eye(6, dtype="float32")])
    model.compile(keras.optimizers.SGD(1e-30), "mse")
    windows = {(t, l): x[:, t:t + 3, l:l + 2, :].reshape(2, -1) for t in range(4)
               for l in range(4)}
    # Each step's loss against one window tells which window it cropped
    # (the same for both images, as Keras crops a batch alike).
    target = windows[(1, 2)]
    seen = set()
    for step in _step_losses_of(model, x, target, 30):
        match = [k for k, v in windows.items()
                 if abs(np.mean((v - target) ** 2) - step) < 1e-3 * (1 + step)]
        assert len(match) == 1, step
        seen.add(match[0])
    assert len(seen) >= 8  # 16 windows, drawn anew each step
    # Inference: the central window of ratio 3:2 (6x4 from 6x5), resized to 3x2.
    centre = x[:, :, 0:4, :]
    want = centre.reshape(2, 3, 2, 2, 2, 1).mean(axis=(2, 4))  # bilinear halving = 2x2 means
    got = keras.Sequential([keras.Input((6, 5, 1)), keras.layers.RandomCrop(3, 2)]).predict(
        x, verbose=0)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def _augmented_classifier(seed):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([
        keras.Input((6, 6, 2)), keras.layers.RandomFlip(seed=11),
        keras.layers.RandomContrast(0.4, value_range=(0, 1), seed=12),
        keras.layers.RandomCrop(5, 4, seed=13), keras.layers.Conv2D(3, 3, activation="relu"),
        keras.layers.Flatten(), keras.layers.Dense(2)])
    model.compile(keras.optimizers.SGD(0.01), "mse")
    return model


@pytest.mark.parametrize("mesh", MESHES, ids=["model3", "data2model2"])
def test_augmentation_trains_sharded_as_on_one_device(mesh):
    rng = np.random.default_rng(2)
    x = rng.uniform(0, 1, size=(8, 6, 6, 2)).astype("float32")
    y = rng.normal(size=(8, 2)).astype("float32")
    _trains_alike(_augmented_classifier, x, y, mesh)


def test_augmentation_errors():
    with pytest.raises(ValueError, match="mode"):
        keras.layers.RandomFlip("diagonal")
    with pytest.raises(ValueError, match="factor"):
        keras.layers.RandomContrast(1.5)
    with pytest.raises(ValueError, match="seed"):
        keras.layers.RandomFlip(seed=-1)


# --- RandomTranslation and RandomZoom -------------------------------------------------------

_NP_MODES = {"reflect": "symmetric", "wrap": "wrap", "nearest": "edge", "constant": "constant"}


def _np_sample(x, axis, src, mode, fill=0.0):
    """NumPy reference: bilinear sampling of x along ``axis`` at float
    positions ``src`` [batch, n_out], the taps floor(src) and floor(src) + 1
    read from x padded by ``mode`` (numpy's symmetric is TF's reflect)."""
    n = x.shape[axis]
    pad = [(0, 0)] * 4
    pad[axis] = (4 * n, 4 * n)
    kw = {"constant_values": fill} if mode == "constant" else {}
    padded = np.pad(x, pad, mode=_NP_MODES[mode], **kw)
    out = []
    for b in range(len(x)):
        s = np.clip(src[b], 0, n - 1) if mode == "nearest" else src[b]
        low = np.floor(s)
        frac = (s - low).reshape((-1, 1) if axis == 1 else (1, -1))[..., None]
        lo = np.take(padded[b], (low + 4 * n).astype(int), axis=axis - 1)
        hi = np.take(padded[b], (low + 1 + 4 * n).astype(int), axis=axis - 1)
        out.append(lo * (1 - frac) + hi * frac)
    return np.stack(out)


def _fixed_probe(layer, x):
    """The layer's training-time output, read through an identity Dense with
    mse 0 against it: here the draws are fixed (factor ranges of width 0),
    so the output is known and the loss against it must be 0."""
    return _probe(layer, x.shape[1:])


@pytest.mark.parametrize("mode", ["reflect", "wrap", "nearest", "constant"])
def test_random_translation_shifts_as_numpy(mode):
    x = np.random.default_rng(4).normal(size=(2, 8, 6, 2)).astype("float32")
    layer = keras.layers.RandomTranslation((0.3125, 0.3125), (-0.25, -0.25), fill_mode=mode,
                                           fill_value=1.5, seed=1)
    model = _fixed_probe(layer, x)
    np.testing.assert_array_equal(model.predict(x, verbose=0), x.reshape(2, -1))  # inference
    rows = np.tile(np.arange(8) - 2.5, (2, 1))  # dy = 0.3125 * 8
    cols = np.tile(np.arange(6) + 1.5, (2, 1))  # dx = -0.25 * 6
    want = _np_sample(_np_sample(x, 1, rows, mode, 1.5), 2, cols, mode, 1.5)
    loss = _step_losses_of(model, x, want.reshape(2, -1), 2)
    np.testing.assert_allclose(loss, 0, atol=1e-9)
    assert np.mean((want - x) ** 2) > 0.1  # the check would see an untranslated image


@pytest.mark.parametrize("factors", [((0.5, 0.5), None), ((-0.25, -0.25), (0.2, 0.2)),
                                     ((5.0, 5.0), None)])
def test_random_zoom_samples_as_numpy(factors):
    x = np.random.default_rng(5).normal(size=(2, 7, 6, 1)).astype("float32")
    height, width = factors
    model = _fixed_probe(keras.layers.RandomZoom(height, width, seed=2), x)
    zy = 1 + height[0]
    zx = zy if width is None else 1 + width[0]
    rows = np.tile((np.arange(7) - 3) * zy + 3, (2, 1))
    cols = np.tile((np.arange(6) - 2.5) * zx + 2.5, (2, 1))
    want = _np_sample(_np_sample(x, 1, rows, "reflect"), 2, cols, "reflect")
    loss = _step_losses_of(model, x, want.reshape(2, -1), 2)
    np.testing.assert_allclose(loss, 0, atol=1e-9)


def test_random_translation_draws_per_image_and_step():
    x = np.random.default_rng(6).normal(size=(1, 8, 1, 1)).astype("float32")
    model = _probe(keras.layers.RandomTranslation((-0.25, 0.25), 0.0, seed=3), x.shape[1:])
    losses = _step_losses(model, x, 16)
    assert len(set(np.round(losses, 6))) > 8 and losses.max() > 0


def _affine_model(seed):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([
        keras.Input((6, 6, 2)), keras.layers.RandomTranslation(0.2, 0.3, seed=21),
        keras.layers.RandomZoom(0.3, seed=22), keras.layers.Conv2D(3, 3, activation="relu"),
        keras.layers.Flatten(), keras.layers.Dense(2)])
    model.compile(keras.optimizers.SGD(0.01), "mse")
    return model


@pytest.mark.parametrize("mesh", MESHES, ids=["model3", "data2model2"])
def test_affine_augmentation_trains_sharded_as_on_one_device(mesh):
    rng = np.random.default_rng(7)
    x = rng.uniform(0, 1, size=(8, 6, 6, 2)).astype("float32")
    y = rng.normal(size=(8, 2)).astype("float32")
    _trains_alike(_affine_model, x, y, mesh)


def test_affine_errors():
    with pytest.raises(ValueError, match="fill_mode"):
        keras.layers.RandomTranslation(0.1, 0.1, fill_mode="mirror")
    with pytest.raises(ValueError, match="interpolation"):
        keras.layers.RandomZoom(0.1, interpolation="nearest")
    with pytest.raises(ValueError, match="above -1"):
        keras.layers.RandomZoom((-1.0, 0.2))


def _np_rotate(x, angle, mode, fill=0.0):
    """NumPy reference of Keras's rotation (TF's rotation matrix): output
    (x, y) reads (cos x - sin y + x0, sin x + cos y + y0) bilinearly from x
    padded by ``mode``."""
    b, h, w, c = x.shape
    cos, sin = np.cos(angle), np.sin(angle)
    x0 = ((w - 1) - (cos * (w - 1) - sin * (h - 1))) / 2
    y0 = ((h - 1) - (sin * (w - 1) + cos * (h - 1))) / 2
    ys, xs = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    sx, sy = cos * xs - sin * ys + x0, sin * xs + cos * ys + y0
    if mode == "nearest":
        sx, sy = np.clip(sx, 0, w - 1), np.clip(sy, 0, h - 1)
    p = 4 * max(h, w)
    kw = {"constant_values": fill} if mode == "constant" else {}
    padded = np.pad(x, ((0, 0), (p, p), (p, p), (0, 0)), mode=_NP_MODES[mode], **kw)
    fy, fx = np.floor(sy), np.floor(sx)
    out = 0
    for dy in (0, 1):
        for dx in (0, 1):
            wgt = (1 - np.abs(sy - fy - dy)) * (1 - np.abs(sx - fx - dx))
            out = out + wgt[None, :, :, None] * padded[:, (fy + dy + p).astype(int),
                                                       (fx + dx + p).astype(int)]
    return out


def test_random_rotation_quarter_turn_is_rot90():
    x = np.random.default_rng(8).normal(size=(2, 5, 5, 2)).astype("float32")
    model = _fixed_probe(keras.layers.RandomRotation((0.25, 0.25), seed=1), x)
    np.testing.assert_array_equal(model.predict(x, verbose=0), x.reshape(2, -1))
    want = np.rot90(x, 1, axes=(1, 2))
    np.testing.assert_allclose(_np_rotate(x, np.pi / 2, "reflect"), want, atol=1e-6)
    loss = _step_losses_of(model, x, want.reshape(2, -1), 2)
    np.testing.assert_allclose(loss, 0, atol=1e-9)


@pytest.mark.parametrize("mode", ["reflect", "wrap", "nearest", "constant"])
@pytest.mark.parametrize("shape,turn", [((7, 6), -1 / 12), ((3, 11), 0.2)])
def test_random_rotation_samples_as_numpy(mode, shape, turn):
    # A thin image turned far reads rows several heights beyond it.
    x = np.random.default_rng(9).normal(size=(2,) + shape + (1,)).astype("float32")
    layer = keras.layers.RandomRotation((turn, turn), fill_mode=mode, fill_value=0.5, seed=2)
    want = _np_rotate(x, 2 * np.pi * turn, mode, 0.5)
    loss = _step_losses_of(_fixed_probe(layer, x), x, want.reshape(2, -1), 2)
    np.testing.assert_allclose(loss, 0, atol=1e-10)
    assert np.mean((want - x) ** 2) > 0.1


def _rotating_model(seed):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([
        keras.Input((6, 6, 2)), keras.layers.RandomRotation(0.2, seed=31),
        keras.layers.Conv2D(3, 3, activation="relu"), keras.layers.Flatten(),
        keras.layers.Dense(2)])
    model.compile(keras.optimizers.SGD(0.01), "mse")
    return model


@pytest.mark.parametrize("mesh", MESHES, ids=["model3", "data2model2"])
def test_rotation_trains_sharded_as_on_one_device(mesh):
    rng = np.random.default_rng(10)
    x = rng.uniform(0, 1, size=(8, 6, 6, 2)).astype("float32")
    y = rng.normal(size=(8, 2)).astype("float32")
    _trains_alike(_rotating_model, x, y, mesh)
