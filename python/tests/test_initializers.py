"""keras.initializers: the variance-scaling family, truncated normals,
Constant and Identity. Drawn weights are checked against Keras's formulas
(keras/src/initializers/random_initializers.py): the mean, the standard
deviation and the support, from large draws; layers take them from Python
(names, objects, configs) and from model files."""

import math

import numpy as np
import pytest

import autoshard.keras as keras
from autoshard import _native
from autoshard.keras import initializers, layers

SHAPE = (300, 400)  # fan_in 300, fan_out 400
CONV = (3, 3, 16, 24)  # fan_in 144, fan_out 216


def fans(shape):
    receptive = math.prod(shape[:-2])
    return shape[-2] * receptive, shape[-1] * receptive


def expected(kind, shape, scale=1.0, mode="fan_in"):
    """(stddev, limit or None) of Keras's VarianceScaling draws."""
    fan_in, fan_out = fans(shape)
    n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[mode]
    var = scale / max(1.0, n)
    if kind == "uniform":
        limit = math.sqrt(3 * var)
        return math.sqrt(var), limit
    if kind == "truncated_normal":  # stddev after the cut is sqrt(var)
        return math.sqrt(var), 2 * math.sqrt(var) / 0.87962566103423978
    return math.sqrt(var), None


PRESETS = [
    (initializers.HeNormal, "truncated_normal", 2.0, "fan_in"),
    (initializers.HeUniform, "uniform", 2.0, "fan_in"),
    (initializers.LecunNormal, "truncated_normal", 1.0, "fan_in"),
    (initializers.LecunUniform, "uniform", 1.0, "fan_in"),
    (initializers.GlorotNormal, "truncated_normal", 1.0, "fan_avg"),
    (initializers.GlorotUniform, "uniform", 1.0, "fan_avg"),
]


def check_moments(w, std, limit=None, mean=0.0):
    assert abs(w.mean() - mean) < 0.02 * std + 1e-7
    assert w.std() == pytest.approx(std, rel=0.02)
    if limit is not None:
        assert np.abs(w - mean).max() <= limit * (1 + 1e-6)
        assert np.abs(w - mean).max() > 0.95 * limit  # the whole range is used


@pytest.mark.parametrize("cls,dist,scale,mode", PRESETS, ids=lambda p: getattr(p, "__name__", ""))
@pytest.mark.parametrize("shape", [SHAPE, CONV])
def test_presets_follow_kerass_formula(cls, dist, scale, mode, shape):
    w = cls(seed=3)(shape)
    assert w.shape == shape and w.dtype == np.float32
    check_moments(w, *expected(dist, shape, scale, mode))


@pytest.mark.parametrize("mode", ["fan_in", "fan_out", "fan_avg"])
@pytest.mark.parametrize("dist", ["truncated_normal", "untruncated_normal", "uniform"])
def test_variance_scaling_modes_and_distributions(mode, dist):
    w = initializers.VarianceScaling(scale=3.0, mode=mode, distribution=dist)(SHAPE)
    check_moments(w, *expected(dist, SHAPE, 3.0, mode))
    if dist == "untruncated_normal":  # a plain normal reaches past two stddev
        std = expected(dist, SHAPE, 3.0, mode)[0]
        frac = np.mean(np.abs(w) > 2 * std)
        assert frac == pytest.approx(0.0455, abs=0.005)


def test_truncated_normal_cuts_at_two_stddev_around_the_mean():
    w = initializers.TruncatedNormal(mean=1.0, stddev=0.5)((400, 500))
    assert w.min() >= 0.0 and w.max() <= 2.0
    # A unit normal cut at +-2 has stddev 0.8796 and a symmetric density.
    check_moments(w, 0.5 * 0.87962566103423978, 1.0, mean=1.0)


def test_constant_identity_and_draws_are_repeatable():
    assert np.all(initializers.Constant(0.25)((3, 4)) == 0.25)
    np.testing.assert_array_equal(initializers.Identity(gain=2.0)((3, 5)),
                                  2.0 * np.eye(3, 5, dtype=np.float32))
    with pytest.raises(Exception, match="rank 2"):
        initializers.Identity()((2, 2, 2))
    a = initializers.HeNormal(seed=5)((20, 30))
    np.testing.assert_array_equal(a, initializers.HeNormal(seed=5)((20, 30)))
    assert not np.array_equal(a, initializers.HeNormal(seed=6)((20, 30)))


def test_get_serialize_deserialize():
    for name, cls in [("he_normal", initializers.HeNormal), ("HeUniform", initializers.HeUniform),
                      ("lecun_normal", initializers.LecunNormal),
                      ("truncated_normal", initializers.TruncatedNormal),
                      ("identity", initializers.IdentityInitializer),
                      ("normal", initializers.RandomNormal), ("uniform", initializers.RandomUniform)]:
        assert type(initializers.get(name)) is cls
    vs = initializers.VarianceScaling(2.5, "fan_out", "uniform", seed=4)
    config = initializers.serialize(vs)
    assert config == {"module": "keras.initializers", "class_name": "VarianceScaling",
                      "config": {"scale": 2.5, "mode": "fan_out", "distribution": "uniform",
                                 "seed": 4}, "registered_name": None}
    back = initializers.deserialize(config)
    np.testing.assert_array_equal(back((10, 10)), vs((10, 10)))
    assert initializers.get({"class_name": "HeNormal", "config": {"seed": None}}).get_config() == \
        {"seed": None}
    with pytest.raises(ValueError, match="he_normall"):
        initializers.get("he_normall")
    with pytest.raises(ValueError, match="mode"):
        initializers.VarianceScaling(mode="fan")
    with pytest.raises(ValueError, match="distribution"):
        initializers.VarianceScaling(distribution="cauchy")
    with pytest.raises(ValueError, match="scale"):
        initializers.VarianceScaling(scale=0)
    assert keras.initializers is initializers and initializers.he_normal is initializers.HeNormal


def dense_kernel(init, units=400, dim=300):
    model = keras.Sequential([keras.Input((dim,)), layers.Dense(units, kernel_initializer=init)])
    return model.get_weights()[0]


@pytest.mark.parametrize("init", ["he_normal", initializers.HeNormal(),
                                  {"class_name": "HeNormal", "config": {"seed": None}}],
                         ids=["name", "object", "config"])
def test_stock_layers_take_them(init):
    check_moments(dense_kernel(init), *expected("truncated_normal", SHAPE, 2.0))


def test_stock_layers_keep_the_arguments():
    # Before: an object's class name alone reached the engine, RandomNormal's
    # stddev was lost.
    check_moments(dense_kernel(initializers.RandomNormal(stddev=0.2)), 0.2)
    conv = keras.Sequential([keras.Input((8, 8, 16)),
                             layers.Conv2D(24, 3, kernel_initializer="lecun_uniform")])
    check_moments(conv.get_weights()[0], *expected("uniform", CONV, 1.0))
    emb = keras.Sequential([keras.Input((4,), dtype="int32"),
                            layers.Embedding(500, 300, embeddings_initializer="he_uniform")])
    check_moments(emb.get_weights()[0], *expected("uniform", (500, 300), 2.0))


class Scaled(layers.Layer):
    def __init__(self, initializer, **kwargs):
        super().__init__(**kwargs)
        self.initializer = initializer

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], 400), initializer=self.initializer)

    def call(self, x):
        return keras.ops.matmul(x, self.w)


@pytest.mark.parametrize("init,dist,scale,mode", [
    ("he_normal", "truncated_normal", 2.0, "fan_in"),
    (initializers.HeUniform(), "uniform", 2.0, "fan_in"),
    ("glorot_normal", "truncated_normal", 1.0, "fan_avg"),
    (initializers.VarianceScaling(0.5, "fan_out", "untruncated_normal"), "normal", 0.5,
     "fan_out"),
])
def test_add_weight_takes_them(init, dist, scale, mode):
    model = keras.Sequential([keras.Input((300,)), Scaled(init)])
    check_moments(model.get_weights()[0], *expected(dist, SHAPE, scale, mode))


def test_a_model_from_its_config_draws_them():
    model = keras.Sequential([
        keras.Input((300,)),
        layers.Dense(400, kernel_initializer=initializers.TruncatedNormal(stddev=0.3),
                     bias_initializer=initializers.Constant(0.5), name="d"),
    ])
    text = model.to_json()
    assert '"TruncatedNormal"' in text
    again = keras.models.model_from_json(text)
    kernel, bias = again.get_weights()
    check_moments(kernel, 0.3 * 0.87962566103423978, 0.6)
    assert np.all(bias == 0.5)


def test_the_file_reader_draws_them(tmp_path):
    """The engine's Keras reader builds layers from a file's config with
    its initializers (what a model without weights starts from, as the
    command line's fresh train): the file's weights left unread."""
    model = keras.Sequential([
        keras.Input((300,)),
        layers.Dense(400, name="d", kernel_initializer=initializers.VarianceScaling(
            2.0, "fan_in", "uniform"), bias_initializer=initializers.Constant(-1.0)),
    ])
    model.get_weights()
    path = str(tmp_path / "m.keras")
    model.save(path)
    kf = _native.KerasFile.read(path, False, False)
    fresh = keras.Model.from_keras_file(kf, compile=False)
    kernel, bias = fresh.get_weights()
    check_moments(kernel, *expected("uniform", SHAPE, 2.0))
    assert np.all(bias == -1.0)


def test_a_custom_initializer_is_refused_by_name():
    class Halves(initializers.Initializer):
        def __call__(self, shape, dtype=None):
            return np.full(shape, 0.5, np.float32)

    with pytest.raises(ValueError, match="Halves: a custom initializer"):
        layers.Dense(3, kernel_initializer=Halves())
    with pytest.raises(ValueError, match="Halves: a custom initializer"):
        keras.Sequential([keras.Input((4,)), Scaled(Halves())]).get_weights()
