"""keras.optimizers.schedules: Keras 3's learning-rate schedules.

The built-in schedules are the engine's (optim/learning_rate_schedules.h,
which also reads them from saved files): each class here keeps Keras's
arguments and config, and asks the engine for its values. A subclass of
``LearningRateSchedule`` with its own ``__call__(step)`` runs in Python,
called once per training step. As in Keras, ``step`` is the optimizer's
step count before the update (0 for the first step).
"""

import json

from ... import _native


class LearningRateSchedule:
    """The base of learning-rate schedules: override ``__call__(step)`` (and
    ``get_config`` to save it)."""

    def __call__(self, step):
        raise NotImplementedError(
            f"Learning rate schedule '{type(self).__name__}' must override `__call__(self, step)`.")

    def get_config(self):
        raise NotImplementedError(
            f"Learning rate schedule '{type(self).__name__}' must override `get_config()` in "
            "order to be serializable.")

    @classmethod
    def from_config(cls, config):
        return cls(**config)


class _EngineSchedule(LearningRateSchedule):
    """A schedule the engine computes, from Keras's class name and config."""

    def __init__(self, **config):
        self._config = config
        # The engine checks the config (types, ranges) now, as Keras's
        # constructors check decay_steps.
        _native.keras_schedule_value(type(self).__name__, self._config_json(), 0)

    def _config_json(self):
        return json.dumps(self._config)

    def __call__(self, step):
        return _native.keras_schedule_value(type(self).__name__, self._config_json(), int(step))

    def get_config(self):
        return dict(self._config)

    def __getattr__(self, name):  # schedule.initial_learning_rate, as Keras's attributes
        config = self.__dict__.get("_config", {})
        if name in config:
            return config[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")


class ExponentialDecay(_EngineSchedule):
    """``initial_learning_rate * decay_rate ** (step / decay_steps)`` (floored with staircase)."""

    def __init__(self, initial_learning_rate, decay_steps, decay_rate, staircase=False,
                 name="ExponentialDecay"):
        super().__init__(initial_learning_rate=initial_learning_rate, decay_steps=decay_steps,
                         decay_rate=decay_rate, staircase=staircase, name=name)


class PiecewiseConstantDecay(_EngineSchedule):
    """``values[i]`` for steps in ``(boundaries[i-1], boundaries[i]]``."""

    def __init__(self, boundaries, values, name="PiecewiseConstant"):
        super().__init__(boundaries=list(boundaries), values=list(values), name=name)


class PolynomialDecay(_EngineSchedule):
    """From ``initial_learning_rate`` to ``end_learning_rate`` over ``decay_steps``, as ``(1 - t) ** power``."""

    def __init__(self, initial_learning_rate, decay_steps, end_learning_rate=0.0001, power=1.0,
                 cycle=False, name="PolynomialDecay"):
        super().__init__(initial_learning_rate=initial_learning_rate, decay_steps=decay_steps,
                         end_learning_rate=end_learning_rate, power=power, cycle=cycle, name=name)


class InverseTimeDecay(_EngineSchedule):
    """``initial_learning_rate / (1 + decay_rate * step / decay_steps)``."""

    def __init__(self, initial_learning_rate, decay_steps, decay_rate, staircase=False,
                 name="InverseTimeDecay"):
        super().__init__(initial_learning_rate=initial_learning_rate, decay_steps=decay_steps,
                         decay_rate=decay_rate, staircase=staircase, name=name)


class CosineDecay(_EngineSchedule):
    """A cosine from the rate (or ``warmup_target`` after a linear warmup) to ``alpha`` of it."""

    def __init__(self, initial_learning_rate, decay_steps, alpha=0.0, name="CosineDecay",
                 warmup_target=None, warmup_steps=0):
        super().__init__(initial_learning_rate=initial_learning_rate, decay_steps=decay_steps,
                         alpha=alpha, name=name, warmup_target=warmup_target,
                         warmup_steps=warmup_steps)


class CosineDecayRestarts(_EngineSchedule):
    """SGDR: cosine periods of ``first_decay_steps * t_mul**i`` steps from ``m_mul**i`` of the rate."""

    def __init__(self, initial_learning_rate, first_decay_steps, t_mul=2.0, m_mul=1.0, alpha=0.0,
                 name="SGDRDecay"):
        super().__init__(initial_learning_rate=initial_learning_rate,
                         first_decay_steps=first_decay_steps, t_mul=t_mul, m_mul=m_mul,
                         alpha=alpha, name=name)


_BUILT_IN = {c.__name__: c for c in (ExponentialDecay, PiecewiseConstantDecay, PolynomialDecay,
                                     InverseTimeDecay, CosineDecay, CosineDecayRestarts)}


def serialize(learning_rate_schedule):
    """The schedule as Keras 3 writes it in a compile config."""
    return {"module": "keras.optimizers.schedules",
            "class_name": type(learning_rate_schedule).__name__,
            "config": learning_rate_schedule.get_config(),
            "registered_name": None if type(learning_rate_schedule).__name__ in _BUILT_IN
            else type(learning_rate_schedule).__name__}


def deserialize(config, custom_objects=None):
    """A schedule from ``serialize``'s form (``custom_objects`` names your own classes)."""
    if not isinstance(config, dict) or "class_name" not in config:
        raise ValueError(f"deserialize: expected a dict with 'class_name' and 'config', got "
                         f"{config!r}")
    name = config["class_name"]
    classes = {**_BUILT_IN, **(custom_objects or {})}
    if name not in classes:
        raise ValueError(f"deserialize: unknown learning-rate schedule '{name}': pass it in "
                         f"custom_objects (known: {', '.join(sorted(_BUILT_IN))})")
    return classes[name].from_config(config.get("config", {}))


def _attach(schedule, native_optimizer):
    """Makes the engine's optimizer take its rate from ``schedule`` at every step."""
    if isinstance(schedule, _EngineSchedule):
        _native.set_keras_schedule(native_optimizer, type(schedule).__name__,
                                   schedule._config_json())
    else:
        _native.set_python_schedule(native_optimizer, schedule)


__all__ = ["LearningRateSchedule", "ExponentialDecay", "PiecewiseConstantDecay",
           "PolynomialDecay", "InverseTimeDecay", "CosineDecay", "CosineDecayRestarts",
           "serialize", "deserialize"]
