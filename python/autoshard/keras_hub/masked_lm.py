"""KerasHub's masked language model, ``keras_hub.models.BertMaskedLM`` (and
the generic ``MaskedLM``), on the engine's BERT encoder.

Followed: keras_hub/src/models/bert/bert_masked_lm.py (the task: the
backbone, then a MaskedLMHead named "mlm_head" over the backbone's
token_embedding, ``intermediate_activation="gelu"``), keras_hub/src/layers/
modeling/masked_lm_head.py (the head: gather the encodings at
``mask_positions``, Dense + GELU, LayerNormalization of epsilon 1e-5, the
tied embeddings reversed, plus ``output_bias``) and keras_hub/src/models/
masked_lm.py (``compile``'s defaults: Adam(5e-5), the sparse categorical
cross-entropy of the logits, weighted accuracy). See docs/keras-hub.md,
"BertMaskedLM".
"""

from .. import _checks, _native
from .. import hf as _hf
from .models import (_Task, History, _batches, _bfloat16, _check_loss, _encoder_inputs,
                     _int_array, _sequence_length, _tokenizer)
from .sharding import placement as _placement

__all__ = ["MaskedLM", "BertMaskedLM", "MaskedLMPreprocessor", "BertMaskedLMPreprocessor"]


class MaskedLM(_Task):
    """A KerasHub masked language model: ``keras_hub.models.BertMaskedLM``
    (or ``MaskedLM``). Its head is the preset's when task.json is a
    BertMaskedLM, else a new one (seeded) on the preset's backbone, as
    KerasHub's Task.from_preset builds a task around a loaded backbone."""

    _encoder = True
    _base_name = "MaskedLM"
    _default_learning_rate = 5e-5  # MaskedLM.compile's optimizer="auto": Adam(5e-5)

    @classmethod
    def _load(cls, path, config, load_weights, mesh, distribution, sharding, dtype, seed, kwargs,
              where):
        preprocessor = kwargs.pop("preprocessor", "auto")  # None: preprocessed input only
        if kwargs:
            raise ValueError(f"{where}: unsupported argument(s) {', '.join(sorted(kwargs))}")
        if not (preprocessor in (None, "auto") or isinstance(preprocessor, MaskedLMPreprocessor)):
            raise TypeError(f"{where}: preprocessor must be a BertMaskedLMPreprocessor or None, "
                            f"not {_checks.shown(preprocessor)}")
        if not load_weights:
            raise ValueError(f"{where}: load_weights=False is not supported for encoders")
        bf16 = _bfloat16(dtype, where)
        placement = _placement(path, mesh, distribution, sharding, where)
        seed = _hf._seed(seed, where)
        native = _hf._OneCallAtATime(_native.Encoder(path, seed, *placement.args(),
                                                     masked_lm=True))
        native.hold_frozen_in_bf16(bf16)
        model = cls(native, path, config["class_name"], native.model_type)
        model.tokenizer = _tokenizer(path)
        model.seed = seed
        # The preset's preprocessor (preprocessor.json's sequence_length,
        # KerasHub's default 512; at most the backbone's positions).
        positions = config.get("config", {}).get("max_sequence_length", 512)
        length = min(_sequence_length(path) or 512, positions)
        model.preprocessor = None if model.tokenizer is None else BertMaskedLMPreprocessor(
            model.tokenizer, sequence_length=length, seed=seed)
        if preprocessor != "auto":
            model.preprocessor = preprocessor
        return model

    @property
    def vocab_size(self):
        return self._native.vocab_size

    def compile(self, optimizer="auto", loss="auto", *, weighted_metrics="auto", **kwargs):
        """MaskedLM.compile: the optimizer ("auto": Adam(5e-5)); the loss is
        the sparse categorical cross-entropy of the logits ("auto")."""
        for k in ("jit_compile", "metrics"):
            kwargs.pop(k, None)
        if kwargs:
            raise ValueError(f"compile: unsupported argument(s) {', '.join(sorted(kwargs))}")
        _check_loss(loss, "a MaskedLM")
        self._optimizer_spec = optimizer
        self._optimizer = None

    def __call__(self, inputs):
        """The logits [batch, masks, vocabulary] at ``mask_positions`` of the
        dict ``{"token_ids", "segment_ids", "padding_mask", "mask_positions"}``
        (segment_ids and padding_mask optional)."""
        import numpy as np

        if _is_text(inputs):
            inputs = self._preprocess(inputs, None, None, "call")[0]
        token_ids, segments, mask, positions = _masked_lm_inputs(inputs, "call")
        logits = self._native.logits(token_ids, segments, mask)  # [batch, tokens, vocabulary]
        # MaskedLMHead.call gathers before its dense layers; they act per
        # position, so gathering their output gives the same rows.
        return np.take_along_axis(logits, positions[..., None].astype(np.int64), 1)

    def predict(self, x, batch_size=None, verbose="auto", **kwargs):
        return self(x)

    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", sample_weight=None,
            shuffle=True, **kwargs):
        """Keras's fit on KerasHub's preprocessed batches (what
        BertMaskedLMPreprocessor returns): ``x`` the dict with
        ``mask_positions`` [n, masks], ``y`` the original token ids there
        [n, masks], ``sample_weight`` [n, masks] (its mask_weights; default
        1: every position counts). The loss is Keras's sum_over_batch_size:
        the weighted sum over n * masks. Returns a History."""
        import numpy as np

        if kwargs:
            raise ValueError(f"fit: unsupported argument(s) {', '.join(sorted(kwargs))}")
        if _is_text(x):
            x, y, sample_weight = self._preprocess(x, y, sample_weight, "fit")
        inputs, y, w = self._xyw(x, y, sample_weight, "fit")
        batch_size = _checks.integer(32 if batch_size is None else batch_size, "batch_size",
                                     "fit", 1, _checks.INT32_MAX)
        epochs = _checks.integer(epochs, "epochs", "fit", 0, _checks.INT32_MAX)
        if self._optimizer is None:
            self._compile_native()
        token_ids, segments, mask, positions = inputs
        labels, weights = _spread_over_tokens(positions, y, w, token_ids.shape[1])
        history = History()
        for epoch in range(epochs):
            losses, sizes = [], []
            for rows in _batches(len(y), batch_size, shuffle, epoch, self.seed):
                losses.append(self._native.train_masked_lm(
                    token_ids[rows], segments[rows], mask[rows], labels[rows], weights[rows]))
                sizes.append(len(rows))
            history.steps += losses
            history.epoch.append(epoch)
            history.history["loss"].append(float(np.average(losses, weights=sizes)))
        return history

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None,
                 return_dict=False, **kwargs):
        """The loss (the sparse categorical cross-entropy of the logits at
        the masked positions, weighted, over n * masks) and the weighted
        accuracy (MaskedLM.compile's weighted_metrics)."""
        import numpy as np

        if kwargs:
            raise ValueError(f"evaluate: unsupported argument(s) {', '.join(sorted(kwargs))}")
        if _is_text(x):
            x, y, sample_weight = self._preprocess(x, y, sample_weight, "evaluate")
        _, y, w = self._xyw(x, y, sample_weight, "evaluate")
        logits = np.asarray(self(x), dtype=np.float64)
        top = logits.max(-1, keepdims=True)
        log_z = np.log(np.exp(logits - top).sum(-1)) + top[..., 0]
        picked = np.take_along_axis(logits, y[..., None], -1)[..., 0]
        loss = float(((log_z - picked) * w).sum() / y.size)
        hits = (logits.argmax(-1) == y) * w
        accuracy = float(hits.sum() / w.sum()) if w.sum() else 0.0
        result = {"loss": loss, "sparse_categorical_accuracy": accuracy}
        return result if return_dict else [loss, accuracy]

    def _preprocess(self, x, y, sample_weight, where):
        """Text through the preset's preprocessor: (x, y, sample_weight)."""
        if self.preprocessor is None:
            raise ValueError(f"{where}: this model has no preprocessor (its preset has no "
                             "tokenizer: tokenizer.json and assets/; or from_preset was given "
                             "preprocessor=None), so it takes preprocessed dicts with "
                             "mask_positions")
        return self.preprocessor(x, y, sample_weight)

    def _xyw(self, x, y, sample_weight, where):
        import numpy as np

        inputs = _masked_lm_inputs(x, where)
        positions = inputs[3]
        if y is None:
            raise ValueError(f"{where}: give y, the original token id at each of "
                             "mask_positions (or text, which the preprocessor masks)")
        y = _int_array(y, "y", where, 2)
        if y.shape != positions.shape:
            raise ValueError(f"{where}: y has shape {y.shape}, mask_positions "
                             f"{positions.shape}; give one label per masked position")
        if np.any((y < 0) | (y >= self.vocab_size)):
            raise ValueError(f"{where}: y holds ids outside the vocabulary of {self.vocab_size}")
        if sample_weight is None:
            w = np.ones(y.shape, np.float32)
        else:
            w = np.asarray(sample_weight, dtype=np.float32)
            if w.shape != y.shape:
                raise ValueError(f"{where}: sample_weight has shape {w.shape}; give one weight "
                                 f"per masked position {y.shape}")
            if not np.all(np.isfinite(w)) or np.any(w < 0):
                raise ValueError(f"{where}: sample_weight must be finite and 0 or more")
        return inputs, y, w


def _is_text(x):
    return isinstance(x, str) or (isinstance(x, (list, tuple)) and bool(x) and
                                  all(isinstance(t, str) for t in x))


def _masked_lm_inputs(inputs, where):
    """token_ids, segment_ids, padding_mask [n, tokens] and mask_positions
    [n, masks] of KerasHub's MaskedLM dict, checked."""
    import numpy as np

    token_ids, segments, mask = _encoder_inputs(inputs, where, ("mask_positions",), "MaskedLM")
    positions = _int_array(inputs["mask_positions"], "mask_positions", where, 2)
    if positions.shape[0] != token_ids.shape[0]:
        raise ValueError(f"{where}: mask_positions has {positions.shape[0]} rows, token_ids "
                         f"{token_ids.shape[0]}")
    if np.any((positions < 0) | (positions >= token_ids.shape[1])):
        raise ValueError(f"{where}: mask_positions must be token positions, 0 to "
                         f"{token_ids.shape[1] - 1}")
    return token_ids, segments, mask, positions


def _spread_over_tokens(positions, y, w, tokens):
    """The labels and weights [n, tokens] the engine trains on: each masked
    position's label at its token, its weight times tokens / masks, so that
    the engine's weighted sum over n * tokens is KerasHub's over n * masks.
    Positions of weight 0 (the preprocessor's padding of mask_positions)
    add nothing; one token masked twice adds both weights."""
    import numpy as np

    n, masks = positions.shape
    labels = np.zeros((n, tokens), np.int32)
    weights = np.zeros((n, tokens), np.float32)
    for row, col in zip(*np.nonzero(w)):
        p = positions[row, col]
        if weights[row, p] and labels[row, p] != y[row, col]:
            raise ValueError(f"fit: mask_positions of row {row} name token {p} twice with "
                             f"different labels ({labels[row, p]}, {y[row, col]})")
        labels[row, p] = y[row, col]
        weights[row, p] += w[row, col] * tokens / masks
    return labels, weights


class MaskedLMPreprocessor:
    """KerasHub's MaskedLMPreprocessor (keras_hub/src/models/
    masked_lm_preprocessor.py; BertMaskedLMPreprocessor) for single
    segments: each text tokenized, packed as ``[CLS] tokens [SEP]`` then
    padding to ``sequence_length`` (truncating the tokens), and masked as
    its MaskedLMMaskGenerator masks (tf_text's RandomItemSelector and
    MaskValuesChooser): ``ceil(mask_selection_rate * n)`` of the n tokens
    that are not special, at most ``mask_selection_length``, chosen at
    random; each becomes [MASK] with ``mask_token_rate``, a random id with
    ``random_token_rate``, else stays. Returns ``(x, y, sample_weight)``:
    x with ``mask_positions`` (ascending, padded with 0 to
    ``mask_selection_length``), y the original ids there, sample_weight 1
    for a masked token and 0 for padding. The draws are NumPy's (seeded),
    not TensorFlow's."""

    def __init__(self, tokenizer, sequence_length=512, mask_selection_rate=0.15,
                 mask_selection_length=96, mask_token_rate=0.8, random_token_rate=0.1, seed=0):
        where = "MaskedLMPreprocessor"
        self.tokenizer = tokenizer
        self.sequence_length = _checks.integer(sequence_length, "sequence_length", where, 3,
                                               _checks.INT32_MAX)
        self.mask_selection_rate = _checks.number(mask_selection_rate, "mask_selection_rate",
                                                  where, 0, 1)
        self.mask_selection_length = _checks.integer(mask_selection_length,
                                                     "mask_selection_length", where, 1,
                                                     _checks.INT32_MAX)
        self.mask_token_rate = _checks.number(mask_token_rate, "mask_token_rate", where, 0, 1)
        self.random_token_rate = _checks.number(random_token_rate, "random_token_rate", where,
                                                0, 1 - self.mask_token_rate)
        ids = {t: tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]", "[MASK]")}
        missing = [t for t, i in ids.items() if i is None]
        if missing:
            raise ValueError(f"{where}: the tokenizer has no {', '.join(missing)} (a "
                             "BertTokenizer's special tokens)")
        self._cls, self._sep, self._pad, self._mask = (ids[t] for t in
                                                       ("[CLS]", "[SEP]", "[PAD]", "[MASK]"))
        self._seed, self._calls = seed, 0

    def __call__(self, x, y=None, sample_weight=None):
        import math

        import numpy as np

        texts = [x] if isinstance(x, str) else list(x)
        if not texts or not all(isinstance(t, str) for t in texts):
            raise ValueError("MaskedLMPreprocessor: give a text or a list of texts (one "
                             "segment each; pairs are not supported)")
        if y is not None or sample_weight is not None:
            raise ValueError("MaskedLMPreprocessor: the labels come from the masking; give no y "
                             "or sample_weight with text")
        rng = np.random.default_rng([self._seed, self._calls])
        self._calls += 1
        n, T, K = len(texts), self.sequence_length, self.mask_selection_length
        token_ids = np.full((n, T), self._pad, np.int32)
        positions = np.zeros((n, K), np.int32)
        labels = np.zeros((n, K), np.int32)
        weights = np.zeros((n, K), np.float32)
        lengths = []
        for row, text in enumerate(texts):
            body = self.tokenizer.encode(text, add_special_tokens=False)[:T - 2]
            packed = [self._cls, *body, self._sep]
            token_ids[row, :len(packed)] = packed
            lengths.append(len(packed))
            selectable = np.arange(1, len(packed) - 1)
            count = min(math.ceil(len(selectable) * self.mask_selection_rate), K)
            chosen = np.sort(rng.permutation(selectable)[:count])
            positions[row, :count] = chosen
            labels[row, :count] = token_ids[row, chosen]
            weights[row, :count] = 1
            draw = rng.random(count)
            masked = draw < self.mask_token_rate
            randomised = ~masked & (draw < self.mask_token_rate + self.random_token_rate)
            token_ids[row, chosen[masked]] = self._mask
            token_ids[row, chosen[randomised]] = rng.integers(
                0, self.tokenizer.vocab_size, int(randomised.sum()))
        padding_mask = np.arange(T) < np.array(lengths)[:, None]  # the packed tokens
        x = {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids),
             "padding_mask": padding_mask, "mask_positions": positions}
        return x, labels, weights


BertMaskedLMPreprocessor = type("BertMaskedLMPreprocessor", (MaskedLMPreprocessor,),
                                {"__module__": __name__})


BertMaskedLM = type("BertMaskedLM", (MaskedLM,),
                    {"_backbone_classes": ("BertBackbone",), "__module__": __name__,
                     "__doc__": "KerasHub's BertMaskedLM (bert_masked_lm.py) on a BertBackbone "
                                "preset."})
