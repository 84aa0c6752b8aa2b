"""keras.callbacks: Callback (subclass it: its methods run at Keras's hooks),
History and Keras 3's built-in callbacks, with Keras 3's rules.

fit calls the hooks in Keras 3's order::

    on_train_begin
      on_epoch_begin
        on_train_batch_begin, on_train_batch_end   (each batch)
        on_test_begin ... on_test_end              (validation, when due)
      on_epoch_end
    on_train_end

evaluate calls on_test_*, predict on_predict_*. The batch hooks of a pass
run only for callbacks that define them (see docs/python.md).
"""

import csv
import errno
import math
import os
import sys
import warnings

import numpy as np

__all__ = [
    "Callback", "CallbackList", "History", "LambdaCallback", "ModelCheckpoint", "EarlyStopping",
    "CSVLogger", "LearningRateScheduler", "TerminateOnNaN", "ReduceLROnPlateau", "ProgbarLogger",
]


class StopTraining(Exception):
    """Raised by the hooks to end fit() early (model.stop_training)."""


class Callback:
    """Keras's Callback: override the hooks; ``self.model`` is the model being fit."""

    def __init__(self):
        self.model = None
        self.params = {}

    def set_model(self, model):
        self.model = model

    def set_params(self, params):
        self.params = params

    def on_train_begin(self, logs=None):
        pass

    def on_train_end(self, logs=None):
        pass

    def on_epoch_begin(self, epoch, logs=None):
        pass

    def on_epoch_end(self, epoch, logs=None):
        pass

    # Keras's on_batch_* are the training batches' hooks.
    def on_batch_begin(self, batch, logs=None):
        pass

    def on_batch_end(self, batch, logs=None):
        pass

    def on_train_batch_begin(self, batch, logs=None):
        self.on_batch_begin(batch, logs=logs)

    def on_train_batch_end(self, batch, logs=None):
        self.on_batch_end(batch, logs=logs)

    def on_test_begin(self, logs=None):
        pass

    def on_test_end(self, logs=None):
        pass

    def on_test_batch_begin(self, batch, logs=None):
        pass

    def on_test_batch_end(self, batch, logs=None):
        pass

    def on_predict_begin(self, logs=None):
        pass

    def on_predict_end(self, logs=None):
        pass

    def on_predict_batch_begin(self, batch, logs=None):
        pass

    def on_predict_batch_end(self, batch, logs=None):
        pass


def _overrides(callback, *names):
    """Whether `callback` defines one of the hooks `names` itself: in its class,
    or on the instance (LambdaCallback's functions)."""
    own = getattr(callback, "__dict__", {})
    return any(n in own or getattr(type(callback), n, None) is not getattr(Callback, n)
               for n in names)


class History(Callback):
    """fit()'s result: ``.history[name]`` holds each epoch's value (loss, metrics, val_*)."""

    def __init__(self):
        super().__init__()
        self.history = {}
        self.epoch = []

    def on_train_begin(self, logs=None):
        self.epoch = []

    def on_epoch_end(self, epoch, logs=None):
        self.epoch.append(epoch)
        for k, v in (logs or {}).items():
            self.history.setdefault(k, []).append(v)
        if self.model is not None:
            self.model.history = self


class CallbackList:
    """The callbacks of one fit, evaluate or predict. fit's engine calls the
    on_* methods below during its epochs; they call the user's callbacks in
    Keras's order and run the validation pass before on_epoch_end."""

    def __init__(self, callbacks, model, validation=None, params=None):
        self.callbacks = list(callbacks)
        self.model = model
        self.validation = validation
        for c in self.callbacks:
            c.set_model(model)
            c.set_params(dict(params or {}))
        # The callbacks that define a training batch hook, in the list's
        # order: the base class's hooks do nothing, and calling them for each
        # callback at every step costs microseconds of a step.
        self._batch_begin_hooks = [c for c in self.callbacks
                                   if _overrides(c, "on_train_batch_begin", "on_batch_begin")]
        self._batch_end_hooks = [c for c in self.callbacks
                                 if _overrides(c, "on_train_batch_end", "on_batch_end")]
        self.epoch = None  # the epoch running, None between epochs
        self.steps = 0
        self.last_logs = {}
        self.epoch_logs = None  # the last epoch's (on_train_end's logs)

    # --- fit's own calls ---------------------------------------------------

    def train_begin(self):
        for c in self.callbacks:
            c.on_train_begin({})

    def train_end(self):
        logs = dict(self.epoch_logs or {})
        for c in self.callbacks:
            c.on_train_end(logs)

    def stopped(self):
        """fit was stopped inside an epoch: that epoch still ends (Keras)."""
        if self.epoch is not None:
            self._end_epoch(self.epoch, _loss_first(self.last_logs))

    # --- the engine's hooks ------------------------------------------------
    # (its own train begin/end are replaced by train_begin/train_end, which
    # fit calls once even when it runs one engine call per epoch)

    def on_train_begin(self):
        pass

    def on_train_end(self):
        pass

    def on_epoch_begin(self, epoch, steps):
        self.epoch, self.steps, self.last_logs = epoch, steps, {}
        for c in self.callbacks:
            c.params["steps"] = steps
            c.on_epoch_begin(epoch, {})
        self._batch_begin(0)

    def _batch_begin(self, batch):
        # Keras looks at stop_training after each batch only: a batch begun
        # runs (and ends) even when a hook stopped training before it.
        for c in self._batch_begin_hooks:
            c.on_train_batch_begin(batch, {})

    def on_train_batch_end(self, batch, logs):
        if self._batch_end_hooks:  # Keras's order for them (stopped() orders it otherwise)
            logs = _loss_first(logs)
            for c in self._batch_end_hooks:
                c.on_train_batch_end(batch, logs)
        self.last_logs = logs
        self._check_stop()
        self._check_finite(batch, logs)
        if batch + 1 < self.steps:
            self._batch_begin(batch + 1)

    def on_epoch_end(self, epoch, logs):
        self._end_epoch(epoch, _loss_first(logs))
        self._check_stop()

    def _check_stop(self):
        if self.model.stop_training:
            raise StopTraining()

    def _check_finite(self, batch, logs):
        # As the CLI does: a loss gone NaN or infinite ends training with an
        # error naming the batch (after the callbacks: TerminateOnNaN stops
        # it quietly, as in Keras). The weights are left as that step made them.
        loss = logs.get("loss")
        if loss is not None and not math.isfinite(loss):
            raise ValueError(f"fit: training diverged: the loss is "
                             f"{'nan' if math.isnan(loss) else 'infinite'} at epoch "
                             f"{self.epoch + 1}, batch {batch + 1} of {self.steps} (lower the "
                             "learning rate, clip with clipnorm, or check the data; "
                             "keras.callbacks.TerminateOnNaN stops without an error)")

    def _end_epoch(self, epoch, logs):
        self.epoch = None
        if self.validation is not None:
            vx, vy, batch_size, freq = self.validation
            if (epoch + 1) % freq == 0:
                val = self.model._evaluate_with_hooks(vx, vy, batch_size, self)
                logs.update(("val_" + k, v) for k, v in val.items())
        for c in self.callbacks:
            c.on_epoch_end(epoch, logs)
        self.epoch_logs = logs

    # --- evaluate and predict ---------------------------------------------

    def wants_batches(self, kind):
        names = (f"on_{kind}_batch_begin", f"on_{kind}_batch_end")
        return any(_overrides(c, *names) for c in self.callbacks)

    def call(self, hook, *args):
        for c in self.callbacks:
            getattr(c, hook)(*args)


def _loss_first(logs):
    # Keras's order: the loss, then the metrics.
    out = {"loss": logs["loss"]} if "loss" in logs else {}
    out.update((k, v) for k, v in logs.items() if k != "loss")
    return out


class LambdaCallback(Callback):
    """keras.callbacks.LambdaCallback: functions as hooks."""

    _HOOKS = ("on_epoch_begin", "on_epoch_end", "on_train_begin", "on_train_end",
              "on_train_batch_begin", "on_train_batch_end", "on_batch_begin", "on_batch_end",
              "on_test_begin", "on_test_end", "on_test_batch_begin", "on_test_batch_end",
              "on_predict_begin", "on_predict_end", "on_predict_batch_begin",
              "on_predict_batch_end")

    def __init__(self, on_epoch_begin=None, on_epoch_end=None, on_train_begin=None,
                 on_train_end=None, on_train_batch_begin=None, on_train_batch_end=None,
                 **kwargs):
        super().__init__()
        hooks = dict(kwargs, on_epoch_begin=on_epoch_begin, on_epoch_end=on_epoch_end,
                     on_train_begin=on_train_begin, on_train_end=on_train_end,
                     on_train_batch_begin=on_train_batch_begin,
                     on_train_batch_end=on_train_batch_end)
        unknown = sorted(set(hooks) - set(self._HOOKS))
        if unknown:
            raise ValueError(f"LambdaCallback: unknown hook(s) {', '.join(unknown)}")
        for name, f in hooks.items():
            if f is not None:
                setattr(self, name, f)


# --- monitored quantities (ModelCheckpoint, EarlyStopping, ReduceLROnPlateau) ---

# Metrics whose larger values are better (Keras's metric._direction "up").
_UP = ("accuracy", "acc", "sparse_categorical_accuracy", "categorical_accuracy",
       "binary_accuracy", "sparse_top_k_categorical_accuracy", "top_k_categorical_accuracy")


def _monitor_op(callback, monitor, mode):
    """np.less or np.greater for a monitored name, as Keras 3 infers it."""
    if mode == "min":
        return np.less
    if mode == "max":
        return np.greater
    name = monitor[4:] if monitor.startswith("val_") else monitor
    if name == "loss" or name.endswith("_loss"):
        return np.less
    model = callback.model
    metric_names = list(getattr(model, "_metric_names", []) or [])
    if name in _UP or (name in metric_names and "accuracy" in name):
        return np.greater
    if name in metric_names or name in ("mae", "mse", "mean_absolute_error",
                                        "mean_squared_error"):
        return np.less
    raise ValueError(
        f"{type(callback).__name__} callback received monitor={monitor}, but Keras isn't able "
        "to automatically determine whether that metric should be maximized or minimized. "
        "Pass `mode='max'` in order to monitor based on the highest metric value, or pass "
        "`mode='min'` in order to use the lowest value.")


def _check_mode(callback, mode):
    if mode not in ("auto", "min", "max"):
        warnings.warn(f"{type(callback).__name__} mode '{mode}' is unknown, fallback to auto "
                      "mode.", stacklevel=3)
        return "auto"
    return mode


def _print(message):
    print(message, file=sys.stdout, flush=True)


class ModelCheckpoint(Callback):
    """Saves the model (``.keras``/``.h5``) or its weights (``.weights.h5``)
    at the end of each epoch or every ``save_freq`` batches; ``filepath`` may
    hold ``{epoch}`` and logs' names (``{val_loss:.2f}``)."""

    def __init__(self, filepath, monitor="val_loss", verbose=0, save_best_only=False,
                 save_weights_only=False, mode="auto", save_freq="epoch",
                 initial_value_threshold=None):
        super().__init__()
        self.filepath = os.fspath(filepath)
        self.monitor = monitor
        self.verbose = verbose
        self.save_best_only = save_best_only
        self.save_weights_only = save_weights_only
        self.mode = _check_mode(self, mode)
        self.save_freq = save_freq
        self.best = initial_value_threshold
        self.monitor_op = None
        self._batches_seen_since_last_saving = 0
        self._last_batch_seen = 0
        self._current_epoch = 0
        if save_freq != "epoch" and not isinstance(save_freq, int):
            raise ValueError(f"Unrecognized save_freq: {save_freq}. Expected save_freq are "
                             "'epoch' or integer values")
        if save_weights_only:
            if not self.filepath.endswith(".weights.h5"):
                raise ValueError("When using `save_weights_only=True` in `ModelCheckpoint`, the "
                                 "filepath provided must end in `.weights.h5` (Keras weights "
                                 f"format). Received: filepath={self.filepath}")
        elif not self.filepath.endswith((".keras", ".h5")):
            raise ValueError("The filepath provided must end in `.keras` (Keras model format). "
                             f"Received: filepath={self.filepath}")

    def _set_monitor_op(self):
        self.monitor_op = _monitor_op(self, self.monitor, self.mode)
        if self.best is None:
            self.best = np.inf if self.monitor_op is np.less else -np.inf

    def on_epoch_begin(self, epoch, logs=None):
        self._current_epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.save_freq == "epoch":
            return
        if batch <= self._last_batch_seen:  # a new epoch
            self._batches_seen_since_last_saving += batch + 1
        else:
            self._batches_seen_since_last_saving += batch - self._last_batch_seen
        self._last_batch_seen = batch
        if self._batches_seen_since_last_saving >= self.save_freq:
            self._batches_seen_since_last_saving = 0
            self._save(self._current_epoch, batch, logs)

    def on_epoch_end(self, epoch, logs=None):
        if self.monitor_op is None:
            self._set_monitor_op()
        if self.save_freq == "epoch":
            self._save(epoch, None, logs)

    def _file_path(self, epoch, batch, logs):
        try:
            if batch is None or "batch" in logs:
                return self.filepath.format(epoch=epoch + 1, **logs)
            return self.filepath.format(epoch=epoch + 1, batch=batch + 1, **logs)
        except KeyError as e:
            raise KeyError(f'Failed to format this callback filepath: "{self.filepath}". '
                           f"Reason: {e}") from None

    def _should_save(self, epoch, logs, filepath):
        if not self.save_best_only:
            if self.verbose > 0:
                _print(f"\nEpoch {epoch + 1}: saving model to {filepath}")
            return True
        if self.monitor_op is None:
            self._set_monitor_op()
        current = logs.get(self.monitor)
        if current is None:
            warnings.warn(f"Can save best model only with {self.monitor} available.",
                          stacklevel=2)
            return True
        best = "None" if self.best is None else f"{self.best:.5f}"
        if self.monitor_op(current, self.best):
            if self.verbose > 0:
                _print(f"\nEpoch {epoch + 1}: {self.monitor} improved from {best} to "
                       f"{current:.5f}, saving model to {filepath}")
            self.best = current
            return True
        if self.verbose > 0:
            _print(f"\nEpoch {epoch + 1}: {self.monitor} did not improve from {best}")
        return False

    def _save(self, epoch, batch, logs):
        logs = logs or {}
        filepath = self._file_path(epoch, batch, logs)
        if not self._should_save(epoch, logs, filepath):
            return
        folder = os.path.dirname(filepath)
        if folder:
            os.makedirs(folder, exist_ok=True)
        if os.path.isdir(filepath):
            raise IOError("Please specify a non-directory filepath for ModelCheckpoint. "
                          f"Filepath used is an existing directory: {filepath}")
        if self.save_weights_only:
            self.model.save_weights(filepath, overwrite=True)
        else:
            self.model.save(filepath, overwrite=True)
        if self.verbose > 0:
            _print(f"\nEpoch {epoch + 1}: finished saving model to {filepath}")


class EarlyStopping(Callback):
    """Stops fit when ``monitor`` has not improved by ``min_delta`` for
    ``patience`` epochs (after ``start_from_epoch``); optionally restores the
    best epoch's weights at the end."""

    def __init__(self, monitor="val_loss", min_delta=0, patience=0, verbose=0, mode="auto",
                 baseline=None, restore_best_weights=False, start_from_epoch=0):
        super().__init__()
        self.monitor = monitor
        self.patience = patience
        self.verbose = verbose
        self.baseline = baseline
        self.min_delta = abs(min_delta)
        self.wait = 0
        self.stopped_epoch = 0
        self.restore_best_weights = restore_best_weights
        self.best_weights = None
        self.start_from_epoch = start_from_epoch
        self.mode = _check_mode(self, mode)
        self.monitor_op = None
        self.best = None
        self.best_epoch = 0

    def _set_monitor_op(self):
        self.monitor_op = _monitor_op(self, self.monitor, self.mode)
        if self.monitor_op is np.less:
            self.min_delta *= -1
        self.best = np.inf if self.monitor_op is np.less else -np.inf

    def on_train_begin(self, logs=None):
        self.wait = 0
        self.stopped_epoch = 0
        self.best_weights = None
        self.best_epoch = 0

    def _is_improvement(self, value, reference):
        return self.monitor_op(value - self.min_delta, reference)

    def on_epoch_end(self, epoch, logs=None):
        if self.monitor_op is None:
            self._set_monitor_op()
        current = (logs or {}).get(self.monitor)
        if current is None:
            warnings.warn(f"Early stopping conditioned on metric `{self.monitor}` which is not "
                          f"available. Available metrics are: {','.join(logs or {})}",
                          stacklevel=2)
            return
        if epoch < self.start_from_epoch:
            return
        if self.restore_best_weights and self.best_weights is None:
            self.best_weights = self.model.get_weights()
            self.best_epoch = epoch
        self.wait += 1
        if self._is_improvement(current, self.best):
            self.best = current
            self.best_epoch = epoch
            if self.restore_best_weights:
                self.best_weights = self.model.get_weights()
            if self.baseline is None or self._is_improvement(current, self.baseline):
                self.wait = 0
            return
        if self.wait >= self.patience and epoch > 0:
            self.stopped_epoch = epoch
            self.model.stop_training = True

    def on_train_end(self, logs=None):
        if self.stopped_epoch > 0 and self.verbose > 0:
            _print(f"Epoch {self.stopped_epoch + 1}: early stopping")
        if self.restore_best_weights and self.best_weights is not None:
            if self.verbose > 0:
                _print("Restoring model weights from the end of the best epoch: "
                       f"{self.best_epoch + 1}.")
            self.model.set_weights(self.best_weights)


def _open_for_writing(path, mode, what):
    """open(path, mode) for text writing ("w" or "a"), except that a FIFO
    with no reader is an error instead of a wait that never ends (Keras's
    open would block); a FIFO with a reader, a terminal or /dev/stdout work
    as with open."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode == "a" else 0)
    if mode == "w" and os.path.isfile(path):
        flags |= os.O_TRUNC
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError as e:
        if e.errno == errno.ENXIO:
            raise OSError(e.errno, f"{what}: a FIFO with no reader is there (writing would "
                          "wait forever): start its reader first, or give a file", path) from None
        raise
    os.set_blocking(fd, True)
    return os.fdopen(fd, mode, newline="")


class CSVLogger(Callback):
    """Writes each epoch's logs as a CSV row (``epoch`` then the names, sorted)."""

    def __init__(self, filename, separator=",", append=False):
        super().__init__()
        self.sep = separator
        self.filename = os.fspath(filename)
        self.append = append
        self.writer = None
        self.keys = None
        self.append_header = True
        self.csv_file = None

    def on_train_begin(self, logs=None):
        if self.append:
            # Only a regular file has a header to find (reading a FIFO would
            # wait for a writer).
            if os.path.isfile(self.filename):
                with open(self.filename) as f:
                    self.append_header = not bool(len(f.readline()))
            mode = "a"
        else:
            mode = "w"
        if self.csv_file and not self.csv_file.closed:
            self.csv_file.close()
        self.csv_file = _open_for_writing(self.filename, mode, "CSVLogger")
        self.writer = None
        self.keys = None

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}

        def value(v):
            if isinstance(v, str):
                return v
            if hasattr(v, "__iter__") and not (isinstance(v, np.ndarray) and v.ndim == 0):
                return f'"[{", ".join(map(str, v))}]"'
            return v

        if self.keys is None:
            self.keys = sorted(logs)
        if not self.writer:
            sep = self.sep

            class Dialect(csv.excel):
                delimiter = sep

            self.writer = csv.DictWriter(self.csv_file, fieldnames=["epoch"] + self.keys,
                                         dialect=Dialect)
            if self.append_header:
                self.writer.writeheader()
        row = {"epoch": epoch}
        row.update((k, value(logs.get(k, "NA"))) for k in self.keys)
        self.writer.writerow(row)
        self.csv_file.flush()

    def on_train_end(self, logs=None):
        if self.csv_file and not self.csv_file.closed:
            self.csv_file.close()
        self.writer = None


class LearningRateScheduler(Callback):
    """Sets the optimizer's learning rate at each epoch's start to
    ``schedule(epoch, lr)`` (or ``schedule(epoch)``); logs it as
    ``learning_rate``."""

    def __init__(self, schedule, verbose=0):
        super().__init__()
        self.schedule = schedule
        self.verbose = verbose

    def on_epoch_begin(self, epoch, logs=None):
        optimizer = self.model.optimizer
        if not hasattr(optimizer, "learning_rate"):
            raise ValueError('Optimizer must have a "learning_rate" attribute.')
        try:
            lr = self.schedule(epoch, float(optimizer.learning_rate))
        except TypeError:  # the one-argument form
            lr = self.schedule(epoch)
        if not isinstance(lr, (float, np.float32, np.float64)):
            raise ValueError(f"The output of the `schedule` function should be a float. Got: {lr}")
        optimizer.learning_rate = lr
        if self.verbose > 0:
            _print(f"\nEpoch {epoch + 1}: LearningRateScheduler setting learning rate to {lr}.")

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["learning_rate"] = float(self.model.optimizer.learning_rate)


class TerminateOnNaN(Callback):
    """Stops fit after a batch whose loss is NaN or infinite (``raise_error``:
    raises RuntimeError instead)."""

    def __init__(self, raise_error=False):
        super().__init__()
        self.raise_error = raise_error

    def on_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and (np.isnan(loss) or np.isinf(loss)):
            if self.raise_error:
                raise RuntimeError(f"NaN or Inf loss encountered at batch {batch}. Loss value: "
                                   f"{loss}. Terminating training immediately.")
            _print(f"Batch {batch}: Invalid loss, terminating training")
            self.model.stop_training = True


class ReduceLROnPlateau(Callback):
    """Multiplies the learning rate by ``factor`` when ``monitor`` has not
    improved for ``patience`` epochs (not below ``min_lr``)."""

    def __init__(self, monitor="val_loss", factor=0.1, patience=10, verbose=0, mode="auto",
                 min_delta=1e-4, cooldown=0, min_lr=0.0, **kwargs):
        super().__init__()
        if factor >= 1.0:
            raise ValueError(f"ReduceLROnPlateau does not support a factor >= 1.0. Received "
                             f"factor={factor}")
        self.monitor = monitor
        self.factor = factor
        self.min_lr = min_lr
        self.min_delta = min_delta
        self.patience = patience
        self.verbose = verbose
        self.cooldown = cooldown
        self.mode = mode
        self._reset()

    def _reset(self):
        if self.mode not in ("auto", "min", "max"):
            warnings.warn(f"Learning rate reduction mode {self.mode} is unknown, fallback to "
                          "auto mode.", stacklevel=2)
            self.mode = "auto"
        if self.mode == "min" or (self.mode == "auto" and "acc" not in self.monitor):
            self.monitor_op = lambda a, b: np.less(a, b - self.min_delta)
            self.best = np.inf
        else:
            self.monitor_op = lambda a, b: np.greater(a, b + self.min_delta)
            self.best = -np.inf
        self.cooldown_counter = 0
        self.wait = 0

    def on_train_begin(self, logs=None):
        self._reset()

    def on_epoch_end(self, epoch, logs=None):
        logs = logs if logs is not None else {}
        logs["learning_rate"] = float(self.model.optimizer.learning_rate)
        current = logs.get(self.monitor)
        if current is None:
            warnings.warn(f"Learning rate reduction is conditioned on metric `{self.monitor}` "
                          f"which is not available. Available metrics are: "
                          f"{','.join(logs)}.", stacklevel=2)
            return
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.wait = 0
        if self.monitor_op(current, self.best):
            self.best = current
            self.wait = 0
        elif self.cooldown_counter <= 0:
            self.wait += 1
            if self.wait >= self.patience:
                old = float(self.model.optimizer.learning_rate)
                if old > np.float32(self.min_lr):
                    new = max(old * self.factor, self.min_lr)
                    self.model.optimizer.learning_rate = new
                    if self.verbose > 0:
                        _print(f"\nEpoch {epoch + 1}: ReduceLROnPlateau reducing learning rate "
                               f"to {new}.")
                    self.cooldown_counter = self.cooldown
                    self.wait = 0


class ProgbarLogger(Callback):
    """Keras 3's progress display (``verbose=1``: a bar redrawn each step;
    2: one line an epoch), written by the CLI's own code on stderr. fit adds
    one when ``verbose`` is not 0; its ``params`` give verbose and epochs."""

    def __init__(self):
        super().__init__()
        self._progress = None

    def _display(self):
        if self._progress is None:
            from .. import _native

            # Under mpirun rank 0 alone prints, as the CLI does.
            self._progress = _native.KerasProgress(int(self.params.get("verbose", 1)),
                                                   _native.world_rank() == 0,
                                                   int(self.params.get("epochs") or 1))
        return self._progress

    def on_train_begin(self, logs=None):
        self._progress = None  # params may have changed since the last fit

    def on_epoch_begin(self, epoch, logs=None):
        self._display().epoch_begin(int(epoch), int(self.params.get("steps") or 0))

    def on_train_batch_end(self, batch, logs=None):
        self._display().step_end(batch + 1, _numbers(logs))

    def on_epoch_end(self, epoch, logs=None):
        self._display().epoch_end(_numbers(logs))

    def start(self):
        """Starts evaluate's clock."""
        self._display()

    def show(self, steps, logs):
        """evaluate's one line."""
        self._display().show_only(int(steps), _numbers(logs))


def _numbers(logs):
    out = {}
    for k, v in (logs or {}).items():
        try:
            value = float(v)
        except (TypeError, ValueError):
            continue
        out[k] = value
    return out
