"""keras.optimizers.schedules: values against Keras's documented formulas,
and training that uses the schedule's value k at step k (checked against the
same steps taken with a constant rate set by hand before each one)."""

import json
import math
import os
import zipfile

import numpy as np
import pytest

import autoshard.keras as keras
from autoshard.keras.optimizers import schedules


def test_values_follow_kerass_formulas():
    e = schedules.ExponentialDecay(0.1, decay_steps=4, decay_rate=0.5)
    assert e(0) == pytest.approx(0.1) and e(4) == pytest.approx(0.05)
    assert e(2) == pytest.approx(0.1 * 0.5 ** 0.5)
    p = schedules.PiecewiseConstantDecay([3, 6], [1.0, 0.5, 0.1])
    assert [p(k) for k in (3, 4, 6, 7)] == [1.0, 0.5, 0.5, 0.1]
    poly = schedules.PolynomialDecay(0.1, 10, end_learning_rate=0.01, power=2.0)
    assert poly(5) == pytest.approx(0.09 * 0.25 + 0.01) and poly(40) == pytest.approx(0.01)
    assert schedules.InverseTimeDecay(0.1, 1.0, 0.5)(2) == pytest.approx(0.05)
    c = schedules.CosineDecay(0.0, 10, warmup_target=0.4, warmup_steps=4)
    assert c(1) == pytest.approx(0.1) and c(9) == pytest.approx(0.2)
    r = schedules.CosineDecayRestarts(0.3, 4, t_mul=1.0, alpha=0.1)
    assert r(4) == pytest.approx(0.3) and r(2) == pytest.approx(0.3 * (0.9 * 0.5 + 0.1))
    assert e.initial_learning_rate == 0.1 and e.get_config()["decay_rate"] == 0.5


def test_bad_schedules_are_refused_when_made():
    with pytest.raises(ValueError, match="'decay_steps' must be > 0"):
        schedules.ExponentialDecay(0.1, decay_steps=0, decay_rate=0.5)
    with pytest.raises(ValueError, match="one value more than boundaries"):
        schedules.PiecewiseConstantDecay([1, 2], [1.0])
    with pytest.raises(ValueError, match="must be a number or a"):
        keras.optimizers.SGD(learning_rate="fast")


class Halving(schedules.LearningRateSchedule):
    def __init__(self, rate):
        self.rate = rate

    def __call__(self, step):
        return self.rate / (step + 1)

    def get_config(self):
        return {"rate": self.rate}


def _model():
    keras.utils.set_random_seed(3)
    m = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="d")])
    return m


DATA = np.random.default_rng(0).standard_normal((8, 3)).astype("float32")
TARGET = np.random.default_rng(1).standard_normal((8, 2)).astype("float32")


def _by_hand(rates):
    m = _model()
    opt = keras.optimizers.SGD(learning_rate=1.0)
    m.compile(opt, "mse")
    for rate in rates:
        opt.learning_rate = rate
        m.train_on_batch(DATA, TARGET)
    return m.get_weights()


@pytest.mark.parametrize("schedule", [
    schedules.ExponentialDecay(0.2, decay_steps=2, decay_rate=0.3),
    schedules.PiecewiseConstantDecay([1, 3], [0.3, 0.1, 0.02]),
    schedules.CosineDecay(0.01, 4, warmup_target=0.3, warmup_steps=2),
    Halving(0.3),
], ids=["exponential", "piecewise", "cosine-warmup", "python-subclass"])
def test_step_k_trains_with_the_schedules_value_at_k(schedule):
    m = _model()
    opt = keras.optimizers.SGD(learning_rate=schedule)
    m.compile(opt, "mse")
    assert opt.iterations == 0 and opt.learning_rate == pytest.approx(schedule(0))
    m.fit(DATA, TARGET, batch_size=8, epochs=5, verbose=0, shuffle=False)
    assert opt.iterations == 5 and opt.learning_rate == pytest.approx(schedule(5))
    want = _by_hand([schedule(k) for k in range(5)])
    for got, expected in zip(m.get_weights(), want):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match="cannot be set"):
        opt.learning_rate = 0.1


def test_a_python_schedule_returning_nonsense_stops_training_with_its_name():
    class Broken(schedules.LearningRateSchedule):
        def __call__(self, step):
            return float("nan") if step == 1 else 0.1

    m = _model()
    m.compile(keras.optimizers.SGD(learning_rate=Broken()), "mse")
    with pytest.raises(ValueError, match="Broken returned nan at step 1"):
        m.fit(DATA, TARGET, batch_size=8, epochs=3, verbose=0)


def test_a_saved_schedule_is_read_back_and_goes_on(tmp_path):
    schedule = schedules.ExponentialDecay(0.2, decay_steps=2, decay_rate=0.3)
    m = _model()
    m.compile(keras.optimizers.SGD(learning_rate=schedule), "mse")
    m.fit(DATA, TARGET, batch_size=8, epochs=2, verbose=0, shuffle=False)
    path = str(tmp_path / "m.keras")
    m.save(path)
    with zipfile.ZipFile(path) as z:
        rate = json.loads(z.read("config.json"))["compile_config"]["optimizer"]["config"][
            "learning_rate"]
    assert rate["class_name"] == "ExponentialDecay" and rate["config"]["decay_steps"] == 2
    loaded = keras.models.load_model(path)
    for model in (m, loaded):
        model.fit(DATA, TARGET, batch_size=8, epochs=2, verbose=0, shuffle=False)
    want = _by_hand([schedule(k) for k in range(4)])
    for got, expected in zip(loaded.get_weights(), want):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_serialize_and_deserialize():
    s = schedules.CosineDecayRestarts(0.3, 4)
    d = schedules.serialize(s)
    assert d["module"] == "keras.optimizers.schedules" and d["class_name"] == "CosineDecayRestarts"
    back = schedules.deserialize(d)
    assert back(7) == pytest.approx(s(7))
    h = schedules.deserialize(schedules.serialize(Halving(0.5)), custom_objects={"Halving": Halving})
    assert h(1) == 0.25
    with pytest.raises(ValueError, match="unknown learning-rate schedule 'Halving'"):
        schedules.deserialize(schedules.serialize(Halving(0.5)))
