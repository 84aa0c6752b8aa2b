"""keras.callbacks: Callback (subclass it: its methods run at Keras's hooks) and History."""


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

    def on_train_batch_begin(self, batch, logs=None):
        pass

    def on_train_batch_end(self, batch, logs=None):
        pass


class History(Callback):
    """fit()'s result: ``.history[name]`` holds each epoch's value (loss, metrics, val_*)."""

    def __init__(self):
        super().__init__()
        self.history = {}
        self.epoch = []

    def on_epoch_end(self, epoch, logs=None):
        self.epoch.append(epoch)
        for k, v in (logs or {}).items():
            self.history.setdefault(k, []).append(v)


class CallbackList:
    """Receives the engine's hooks during fit and calls the user's callbacks
    in Keras's order; runs the validation pass before on_epoch_end."""

    def __init__(self, callbacks, model, validation=None):
        self.callbacks = callbacks
        self.model = model
        self.validation = validation
        for c in callbacks:
            c.set_model(model)

    def train_begin(self):
        for c in self.callbacks:
            c.on_train_begin({})

    def train_end(self):
        for c in self.callbacks:
            c.on_train_end({})

    # The engine's hooks (its own begin/end are replaced by train_begin/end,
    # which fit calls once even when it runs one engine call per epoch).
    def on_train_begin(self):
        pass

    def on_train_end(self):
        pass

    def on_epoch_begin(self, epoch, steps):
        for c in self.callbacks:
            c.params = {"epochs": None, "steps": steps, "verbose": 0}
            c.on_epoch_begin(epoch, {})

    def on_train_batch_end(self, batch, logs):
        logs = _loss_first(logs)
        for c in self.callbacks:
            c.on_train_batch_end(batch, logs)

    def on_epoch_end(self, epoch, logs):
        logs = _loss_first(logs)
        if self.validation is not None:
            vx, vy, batch_size, freq = self.validation
            if (epoch + 1) % freq == 0:
                val = self.model._native.evaluate(vx, vy, batch_size)
                logs.update(("val_" + k, v) for k, v in val.items())
        for c in self.callbacks:
            c.on_epoch_end(epoch, logs)
        if self.model.stop_training:
            raise StopTraining()


def _loss_first(logs):
    # Keras's order: the loss, then the metrics.
    out = {"loss": logs["loss"]} if "loss" in logs else {}
    out.update((k, v) for k, v in logs.items() if k != "loss")
    return out


class LambdaCallback(Callback):
    """keras.callbacks.LambdaCallback: functions as hooks."""

    def __init__(self, on_epoch_begin=None, on_epoch_end=None, on_train_batch_end=None,
                 on_train_begin=None, on_train_end=None, **kwargs):
        super().__init__()
        if kwargs:
            raise ValueError(f"LambdaCallback: unsupported hook(s) {', '.join(sorted(kwargs))}")
        for name, f in (("on_epoch_begin", on_epoch_begin), ("on_epoch_end", on_epoch_end),
                        ("on_train_batch_end", on_train_batch_end),
                        ("on_train_begin", on_train_begin), ("on_train_end", on_train_end)):
            if f is not None:
                setattr(self, name, f)
