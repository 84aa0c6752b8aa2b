"""keras.optimizers: Keras 3's optimizers with Keras's defaults, the engine's rules;
``keras.optimizers.schedules``: the learning-rate schedules."""

import numbers

from ... import _checks, _native
from .. import utils as _utils
from . import schedules


class Optimizer:
    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _utils.record_init_args(cls)  # model.save writes them as the compile config

    def __init__(self, native):
        self._native = native
        self._model_native = None  # the compiled model's engine: its step count
        rate = getattr(self, "_init_args", {}).get("learning_rate")
        self._schedule = rate if isinstance(rate, schedules.LearningRateSchedule) else None
        if self._schedule is not None:
            schedules._attach(self._schedule, native)

    @property
    def iterations(self):
        """Steps taken (Keras's ``optimizer.iterations``): the compiled model's."""
        return 0 if self._model_native is None else _native.model_iterations(self._model_native)

    @property
    def learning_rate(self):
        """The rate of the next step: the schedule's value at ``iterations`` when there is one."""
        if self._schedule is not None:
            return float(self._schedule(self.iterations))
        return self._native.learning_rate

    @learning_rate.setter
    def learning_rate(self, value):
        if self._schedule is not None:  # Keras's rule too
            raise TypeError(f"{type(self).__name__}: the learning rate comes from the schedule "
                            f"{type(self._schedule).__name__} given to the optimizer and cannot "
                            f"be set; give a number as learning_rate to set it")
        # A scheduler's value too: NaN or infinity would train on silently.
        # 0 is Keras's too (a schedule that decays to 0, say).
        self._native.learning_rate = _checks.number(value, "learning_rate",
                                                    type(self).__name__, minimum=0)


def _check(kwargs, name):
    clipnorm = kwargs.pop("global_clipnorm", None) or kwargs.pop("clipnorm", None) or 0.0
    kwargs.pop("name", None)
    if kwargs:
        raise ValueError(f"{name}: unsupported argument(s) {', '.join(sorted(kwargs))}")
    return _checks.number(clipnorm, "clipnorm", name, minimum=0)


def _lr(value, name):
    """The engine's learning rate: the number, or for a schedule (which
    Optimizer.__init__ attaches) its first value, 1 where that is 0."""
    if isinstance(value, schedules.LearningRateSchedule):
        first = _checks.number(value(0), "the schedule's learning rate at step 0", name, minimum=0)
        return first or 1.0
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name}: learning_rate must be a number or a "
                         f"keras.optimizers.schedules.LearningRateSchedule, not {value!r}")
    return _checks.number(value, "learning_rate", name, above=0)


def _f(value, what, name):
    # A finite float (the engine checks each argument's range).
    return _checks.number(value, what, name)


class SGD(Optimizer):
    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, **kwargs):
        clip = _check(kwargs, "SGD")
        super().__init__(_native.SGD(_lr(learning_rate, "SGD"), _f(momentum, "momentum", "SGD"),
                                     bool(nesterov), clip))


class Adam(Optimizer):
    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
                 weight_decay=None, **kwargs):
        clip = _check(kwargs, "Adam")
        super().__init__(_native.Adam(_lr(learning_rate, "Adam"), _f(beta_1, "beta_1", "Adam"),
                                      _f(beta_2, "beta_2", "Adam"), _f(epsilon, "epsilon", "Adam"),
                                      _f(weight_decay or 0.0, "weight_decay", "Adam"), clip))


class AdamW(Optimizer):
    def __init__(self, learning_rate=0.001, weight_decay=0.004, beta_1=0.9, beta_2=0.999,
                 epsilon=1e-7, **kwargs):
        clip = _check(kwargs, "AdamW")
        super().__init__(_native.AdamW(_lr(learning_rate, "AdamW"), _f(beta_1, "beta_1", "AdamW"),
                                       _f(beta_2, "beta_2", "AdamW"),
                                       _f(epsilon, "epsilon", "AdamW"),
                                       _f(weight_decay, "weight_decay", "AdamW"), clip))


class RMSprop(Optimizer):
    def __init__(self, learning_rate=0.001, rho=0.9, momentum=0.0, epsilon=1e-7, centered=False,
                 **kwargs):
        clip = _check(kwargs, "RMSprop")
        super().__init__(_native.RMSprop(_lr(learning_rate, "RMSprop"), _f(rho, "rho", "RMSprop"),
                                         _f(momentum, "momentum", "RMSprop"),
                                         _f(epsilon, "epsilon", "RMSprop"), bool(centered), clip))


class Adagrad(Optimizer):
    def __init__(self, learning_rate=0.001, initial_accumulator_value=0.1, epsilon=1e-7,
                 **kwargs):
        clip = _check(kwargs, "Adagrad")
        super().__init__(_native.Adagrad(_lr(learning_rate, "Adagrad"),
                                         _f(initial_accumulator_value, "initial_accumulator_value",
                                            "Adagrad"), _f(epsilon, "epsilon", "Adagrad"), clip))


_BY_NAME = {"sgd": SGD, "adam": Adam, "adamw": AdamW, "rmsprop": RMSprop, "adagrad": Adagrad}


def get(identifier):
    """An Optimizer from an object or a Keras name ("adam", "sgd", "rmsprop", ...)."""
    if isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, str) and identifier.lower() in _BY_NAME:
        return _BY_NAME[identifier.lower()]()
    raise ValueError(f"optimizer must be one of {', '.join(_BY_NAME)} or a keras.optimizers "
                     f"object, not {identifier!r}")
