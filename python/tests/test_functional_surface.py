"""The functional surface the Keras guides use: the merge functions,
get_layer, layer.input/output, model.inputs/outputs/layers, nested models
and shared layers (weights shared as Keras shares them), configs and JSON,
clone_model, the registry and custom_objects, PyDataset and generators,
plot_model."""

import json
import os
import shutil

import numpy as np
import pytest

import autoshard.keras as keras
from autoshard.keras.distribution import DataParallel, set_distribution


def _two_inputs():
    a = keras.Input((4,), name="a")
    b = keras.Input((4,), name="b")
    return a, b, [np.random.default_rng(i).normal(size=(6, 4)).astype(np.float32)
                  for i in range(2)]


@pytest.mark.parametrize("fn, ref", [
    ("add", lambda u, v: u + v), ("subtract", lambda u, v: u - v),
    ("multiply", lambda u, v: u * v), ("average", lambda u, v: (u + v) / 2),
    ("maximum", np.maximum), ("minimum", np.minimum),
    ("concatenate", lambda u, v: np.concatenate([u, v], axis=-1)),
])
def test_merge_functions_match_numpy(fn, ref):
    a, b, (u, v) = _two_inputs()
    model = keras.Model([a, b], getattr(keras.layers, fn)([a, b]))
    np.testing.assert_allclose(model.predict([u, v], verbose=0), ref(u, v), rtol=1e-6)


def test_dot_matches_numpy_with_and_without_normalize():
    a, b, (u, v) = _two_inputs()
    model = keras.Model([a, b], [keras.layers.dot([a, b], axes=1),
                                 keras.layers.dot([a, b], axes=-1, normalize=True)])
    plain, cosine = model.predict([u, v], verbose=0)
    np.testing.assert_allclose(plain, (u * v).sum(-1, keepdims=True), rtol=1e-5)
    want = (u * v).sum(-1) / np.linalg.norm(u, axis=-1) / np.linalg.norm(v, axis=-1)
    np.testing.assert_allclose(cosine[:, 0], want, rtol=1e-5)
    # Keras's example: (1, 5, 2) . (1, 2, 5) on axes (1, 2) -> (1, 2, 2)
    x = keras.Input((5, 2))
    y = keras.Input((2, 5))
    m = keras.Model([x, y], keras.layers.Dot(axes=(1, 2))([x, y]))
    xs = np.arange(10, dtype=np.float32).reshape(1, 5, 2)
    ys = np.arange(10, 20, dtype=np.float32).reshape(1, 2, 5)
    np.testing.assert_allclose(m.predict([xs, ys], verbose=0), [[[260, 360], [320, 445]]])


def _classifier():
    x = keras.Input((3,), name="features")
    h = keras.layers.Dense(5, activation="relu", name="hidden")(x)
    y = keras.layers.Dense(2, activation="softmax", name="logits")(h)
    return keras.Model(x, y, name="classifier")


def test_layers_get_layer_inputs_outputs():
    model = _classifier()
    assert [l.name for l in model.layers] == ["features", "hidden", "logits"]
    assert type(model.layers[0]).__name__ == "InputLayer"
    hidden = model.get_layer("hidden")
    assert model.get_layer(index=1) is hidden
    assert hidden.input is model.inputs[0] and model.input is model.inputs[0]
    assert model.get_layer("logits").output is model.output is model.outputs[0]
    with pytest.raises(ValueError, match="No such layer: nope. Existing layers are"):
        model.get_layer("nope")
    with pytest.raises(ValueError, match="has never been called"):
        _ = keras.layers.Dense(2).output


def test_feature_extractor_shares_trained_weights():
    model = _classifier()
    model.compile("adam", "sparse_categorical_crossentropy")
    x = np.random.default_rng(0).normal(size=(32, 3)).astype(np.float32)
    model.fit(x, np.arange(32) % 2, epochs=3, verbose=0)
    features = keras.Model(model.inputs, model.get_layer("hidden").output)
    w, b = model.get_weights()[:2]
    np.testing.assert_allclose(features.predict(x, verbose=0), np.maximum(x @ w + b, 0),
                               rtol=1e-5, atol=1e-6)


def test_nested_models_share_weights_both_ways():
    enc_in = keras.Input((6,))
    encoder = keras.Model(enc_in, keras.layers.Dense(2, name="enc")(enc_in), name="encoder")
    dec_in = keras.Input((2,))
    decoder = keras.Model(dec_in, keras.layers.Dense(6, name="dec")(dec_in), name="decoder")
    x_in = keras.Input((6,))
    autoencoder = keras.Model(x_in, decoder(encoder(x_in)))
    # Keras lists a nested model as one layer
    assert [l.name for l in autoencoder.layers][1:] == ["encoder", "decoder"]
    assert autoencoder.get_layer("encoder") is encoder
    autoencoder.compile(keras.optimizers.Adam(0.02), "mse")
    x = np.random.default_rng(1).normal(size=(40, 6)).astype(np.float32)
    history = autoencoder.fit(x, x, epochs=10, verbose=0).history["loss"]
    assert history[-1] < history[0]
    # The encoder alone runs with the weights the autoencoder trained.
    kernel, bias = autoencoder.get_weights()[:2]
    np.testing.assert_allclose(encoder.predict(x, verbose=0), x @ kernel + bias, rtol=1e-5,
                               atol=1e-6)
    # and weights set on the encoder reach the autoencoder
    encoder.set_weights([np.zeros_like(kernel), np.ones_like(bias)])
    np.testing.assert_allclose(autoencoder.get_weights()[1], np.ones_like(bias))


def test_a_shared_layer_and_a_sequential_inside_a_functional_model():
    shared = keras.layers.Dense(3, name="shared")
    a, b, (u, v) = _two_inputs()
    head = keras.Sequential([keras.layers.Dense(1, name="s_head")])
    out = head(keras.layers.add([shared(a), shared(b)]))
    model = keras.Model([a, b], out)
    assert len(model.get_weights()) == 4  # the shared layer's weights once
    k, c, hk, hc = model.get_weights()
    want = ((u @ k + c) + (v @ k + c)) @ hk + hc
    np.testing.assert_allclose(model.predict([u, v], verbose=0), want, rtol=1e-5, atol=1e-6)


def test_calling_a_model_on_arrays_predicts():
    model = _classifier()
    x = np.ones((2, 3), np.float32)
    np.testing.assert_allclose(model(x), model.predict(x, verbose=0))


def test_sequential_inputs_outputs_and_feature_extraction():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, name="s1"),
                              keras.layers.Dense(1, name="s2")])
    assert len(model.inputs) == 1 and len(model.outputs) == 1
    features = keras.Model(model.inputs, model.get_layer("s1").output)
    w, b = model.get_weights()[:2]
    x = np.ones((2, 3), np.float32)
    np.testing.assert_allclose(features.predict(x, verbose=0), x @ w + b, rtol=1e-6)


def test_config_json_and_clone_rebuild_the_architecture():
    a, b, (u, v) = _two_inputs()
    h = keras.layers.concatenate([keras.layers.Dense(3, name="da")(a), b])
    model = keras.Model([a, b], keras.layers.Dense(2, name="out")(h), name="two")
    for rebuilt in (keras.Model.from_config(model.get_config()),
                    keras.models.model_from_json(model.to_json()),
                    keras.models.clone_model(model)):
        assert [l.name for l in rebuilt.layers] == [l.name for l in model.layers]
        assert rebuilt.name == "two"
        rebuilt.set_weights(model.get_weights())
        np.testing.assert_allclose(rebuilt.predict([u, v], verbose=0),
                                   model.predict([u, v], verbose=0), rtol=1e-6)
    assert json.loads(model.to_json())["class_name"] == "Functional"
    seq = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, name="q")], name="seq")
    again = keras.Sequential.from_config(seq.get_config())
    assert [l.name for l in again.layers] == ["q"]


def test_registered_and_custom_objects_classes():
    @keras.saving.register_keras_serializable(package="shapes_test")
    class WideDense(keras.layers.Dense):
        pass

    x = keras.Input((3,))
    model = keras.Model(x, WideDense(4, name="wide")(x))
    config = json.loads(model.to_json())
    entry = config["config"]["layers"][1]
    assert entry["registered_name"] == "shapes_test>WideDense"
    assert keras.saving.get_registered_object("shapes_test>WideDense") is WideDense
    rebuilt = keras.models.model_from_json(model.to_json())
    assert type(rebuilt.get_layer("wide")) is WideDense
    entry["registered_name"] = None
    entry["class_name"] = "Unregistered"
    with pytest.raises(ValueError, match="unknown class 'Unregistered'.*custom_objects"):
        keras.models.model_from_json(json.dumps(config))
    rebuilt = keras.models.model_from_json(json.dumps(config),
                                           custom_objects={"Unregistered": WideDense})
    assert type(rebuilt.get_layer("wide")) is WideDense


def test_load_model_takes_custom_objects_it_does_not_need(tmp_path):
    model = _classifier()
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.models.load_model(path, custom_objects={"Nothing": object})
    x = np.ones((2, 3), np.float32)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0))


def test_a_model_with_dot_saves_and_loads(tmp_path):
    a, b, (u, v) = _two_inputs()
    model = keras.Model([a, b], keras.layers.dot([keras.layers.Dense(4, name="p")(a), b], axes=1,
                                                 normalize=True))
    path = str(tmp_path / "dot.keras")
    model.save(path)
    np.testing.assert_allclose(keras.models.load_model(path).predict([u, v], verbose=0),
                               model.predict([u, v], verbose=0), rtol=1e-6)


class _Batches(keras.utils.PyDataset):
    def __init__(self, x, y, batch_size, **kwargs):
        super().__init__(**kwargs)
        self.x, self.y, self.batch_size = x, y, batch_size
        self.epochs_ended = 0

    def __len__(self):
        return -(-len(self.x) // self.batch_size)

    def __getitem__(self, i):
        part = slice(i * self.batch_size, (i + 1) * self.batch_size)
        return self.x[part], self.y[part]

    def on_epoch_end(self):
        self.epochs_ended += 1


def _regression_data():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(22, 3)).astype(np.float32)
    return x, (x @ np.array([[1.0], [-2.0], [0.5]])).astype(np.float32)


def _regressor():
    keras.utils.set_random_seed(11)
    x = keras.Input((3,))
    model = keras.Model(x, keras.layers.Dense(1, name="lin")(x))
    model.compile(keras.optimizers.SGD(0.05), "mse")
    return model


def test_pydataset_and_generators_equal_arrays():
    x, y = _regression_data()
    want = _regressor().fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0)
    data = _Batches(x, y, 8)
    model = _regressor()
    got = model.fit(data, epochs=3, verbose=0)
    np.testing.assert_allclose(got.history["loss"], want.history["loss"], rtol=1e-6)
    assert data.epochs_ended == 3
    np.testing.assert_allclose(model.evaluate(data, verbose=0),
                               model.evaluate(x, y, batch_size=8, verbose=0), rtol=1e-6)
    np.testing.assert_allclose(model.predict(_Batches(x, y, 8), verbose=0),
                               model.predict(x, verbose=0), rtol=1e-6)

    def forever():
        while True:
            for i in range(0, 22, 8):
                yield x[i:i + 8], y[i:i + 8]

    gen = _regressor().fit(forever(), steps_per_epoch=3, epochs=3, verbose=0,
                           validation_data=_Batches(x, y, 8))
    np.testing.assert_allclose(gen.history["loss"], want.history["loss"], rtol=1e-6)
    assert len(gen.history["val_loss"]) == 3


def test_batches_of_mixed_sizes_are_refused():
    x, y = _regression_data()
    batches = iter([(x[:8], y[:8]), (x[8:11], y[8:11]), (x[11:19], y[11:19])])
    with pytest.raises(ValueError, match="give batches of one size"):
        _regressor().fit(batches, verbose=0)


def test_pydataset_training_sharded_equals_one_device():
    x, y = _regression_data()
    one = _regressor().fit(_Batches(x, y, 8), epochs=2, verbose=0).history["loss"]
    set_distribution(DataParallel(devices=["cpu:0", "cpu:1"]))
    two = _regressor().fit(_Batches(x, y, 8), epochs=2, verbose=0).history["loss"]
    np.testing.assert_allclose(two, one, rtol=1e-5)


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
@pytest.mark.parametrize("ext, magic", [("png", b"\x89PNG"), ("svg", b"<?xml")])
def test_plot_model_writes_a_real_image(tmp_path, ext, magic):
    a, b, _ = _two_inputs()
    model = keras.Model([a, b], keras.layers.Dense(1, name="head")(keras.layers.add([a, b])))
    path = str(tmp_path / f"model.{ext}")
    keras.utils.plot_model(model, to_file=path, show_shapes=True)
    with open(path, "rb") as f:
        head = f.read(5)
    assert head.startswith(magic) and os.path.getsize(path) > 200
    text = keras.utils.model_to_dot(model)
    assert '"head (Dense)"' in text and text.count("->") == 3
