"""KerasHub's model classes (``keras_hub.models``) on the engine's language
models: ``<Family>Backbone``, ``<Family>CausalLM`` and, for BERT and RoBERTa,
``<Family>TextClassifier``, for every backbone class the engine's model
families read (src/models/registry.cc; ``_native.keras_hub_backbones()``).

Each is made by ``from_preset(path)`` from a KerasHub preset directory and
runs on the machinery of ``autoshard.from_pretrained`` (python/src/bind_hf.cc:
the same load, placement and generation as ``autoshard generate``). Followed:
keras_hub/src/models/task.py (``Task.from_preset``), causal_lm.py
(``CausalLM.compile``, ``generate``), text_classifier.py and backbone.py
(``save_to_preset``). See docs/keras-hub.md, "From Python".
"""

import os

from .. import _checks, _native
from .. import hf as _hf
from . import samplers as _samplers
from .sharding import PresetPlan, placement as _placement

__all__ = ["Backbone", "CausalLM", "TextClassifier"]

# The tokenizer class of a preset (tokenizer.json) -> its end tokens, the
# ids generate(stop_token_ids="auto") stops at (KerasHub's end_token_id and,
# for Llama 3, end_token2_id).
_END_TOKENS = {"GPT2Tokenizer": ("<|endoftext|>",), "OPTTokenizer": ("</s>",),
               "LlamaTokenizer": ("</s>",), "MistralTokenizer": ("</s>",),
               "GemmaTokenizer": ("<eos>",), "QwenTokenizer": ("<|endoftext|>",),
               "Llama3Tokenizer": ("<|end_of_text|>", "<|eot_id|>")}


def _families():
    """Backbone class -> whether it is an encoder, as the registry says."""
    return dict(_native.keras_hub_backbones())


def _known():
    return ", ".join(_families())


def _preset_dir(preset, cls):
    """The preset directory ``preset`` names, checked, and its config.json."""
    where = f"{cls.__name__}.from_preset"
    if not isinstance(preset, (str, os.PathLike)):
        raise TypeError(f"{where}: preset must be a path to a KerasHub preset directory, got "
                        f"{_checks.shown(preset)}")
    path = os.fspath(preset)
    if "://" in path or not os.path.exists(path):
        raise FileNotFoundError(
            f"{where}: '{path}' is not a preset directory; autoshard reads KerasHub presets "
            "from local directories and downloads nothing (fetch it first, e.g. with "
            "kagglehub.model_download, and give the directory)")
    if not os.path.isdir(path):
        raise ValueError(f"{where}: '{path}' is a file; give the preset's directory")
    config_path = os.path.join(path, "config.json")
    if not os.path.isfile(config_path):
        raise ValueError(f"{where}: '{path}' has no config.json, so it is not a KerasHub preset")
    config = _checks.read_json(config_path, "KerasHub config.json")
    if not isinstance(config, dict) or "class_name" not in config:
        hint = ("; it is a Hugging Face directory: load it with autoshard.from_pretrained"
                if isinstance(config, dict) and "model_type" in config else "")
        raise ValueError(f"{where}: '{config_path}' names no backbone class (\"class_name\"), "
                         f"so '{path}' is not a KerasHub preset{hint}")
    return path, config


def _check_class(cls, backbone_class):
    """KerasHub's check that the preset's backbone is the calling class's
    (task.py ``Task.from_preset``: the saved backbone must be a subclass of
    ``cls.backbone_cls``; Llama3Backbone is a LlamaBackbone there)."""
    families = _families()
    if backbone_class not in families:
        raise ValueError(f"{cls.__name__}.from_preset: the preset's backbone is "
                         f"{backbone_class}, which autoshard has no architecture for (it has "
                         f"{_known()})")
    wanted = cls._backbone_classes
    if wanted is not None and backbone_class not in wanted:
        raise ValueError(f"{cls.__name__}.from_preset: the preset holds a {backbone_class}, not "
                         f"a {wanted[0]}; load it with {_task_name(backbone_class, cls)} or "
                         f"keras_hub.models.{cls._base_name}.from_preset")
    encoder = families[backbone_class]
    if cls._encoder is not None and cls._encoder != encoder:
        what = "an encoder (a TextClassifier)" if encoder else "a decoder (a CausalLM)"
        raise ValueError(f"{cls.__name__}.from_preset: {backbone_class} is {what}; load it "
                         f"with {_task_name(backbone_class, None)}")
    return encoder


def _task_name(backbone_class, cls):
    family = backbone_class[: -len("Backbone")]
    if cls is not None and issubclass(cls, Backbone):
        return f"keras_hub.models.{backbone_class}"
    encoder = _families().get(backbone_class, False)
    return f"keras_hub.models.{family}{'TextClassifier' if encoder else 'CausalLM'}"


def _tokenizer(path):
    return _hf._directory_tokenizer(path)


def _tokenizer_class(path):
    p = os.path.join(path, "tokenizer.json")
    if not os.path.isfile(p):
        return None
    j = _checks.read_json(p, "KerasHub tokenizer.json")
    return j.get("class_name") if isinstance(j, dict) else None


def _task_class(path):
    """task.json's class_name, or None."""
    p = os.path.join(path, "task.json")
    if not os.path.isfile(p):
        return None
    j = _checks.read_json(p, "KerasHub task.json")
    return j.get("class_name") if isinstance(j, dict) else None


def _sequence_length(path):
    """preprocessor.json's sequence_length, or None."""
    p = os.path.join(path, "preprocessor.json")
    if not os.path.isfile(p):
        return None
    j = _checks.read_json(p, "KerasHub preprocessor.json")
    config = j.get("config") if isinstance(j, dict) else None
    return config.get("sequence_length") if isinstance(config, dict) else None


class History:
    """What fit returns, as Keras's: ``history["loss"]`` per epoch, and
    ``steps``, each step's loss."""

    def __init__(self):
        self.history = {"loss": []}
        self.epoch = []
        self.steps = []


class Backbone:
    """A KerasHub backbone: ``keras_hub.models.<Family>Backbone`` (or
    ``Backbone``, any family). The engine runs it with its task's head; a
    backbone alone is loaded, counted and saved (``save_to_preset``)."""

    _backbone_classes = None  # None: any family
    _encoder = None
    _base_name = "Backbone"

    def __init__(self, task):
        self._task = task

    @classmethod
    def from_preset(cls, preset, load_weights=True, *, mesh=None, distribution=None,
                    sharding=None, dtype=None, seed=0, **kwargs):
        """The backbone of the preset directory ``preset`` (its task's head
        with it); ``mesh``, ``distribution`` and ``sharding`` as CausalLM's."""
        path, config = _preset_dir(preset, cls)
        encoder = _check_class(cls, config["class_name"])
        task_cls = TextClassifier if encoder else CausalLM
        if encoder and (_task_class(path) or "").endswith("MaskedLM"):
            from .masked_lm import MaskedLM as task_cls  # the preset's task: BertMaskedLM
        task = task_cls._load(path, config, load_weights, mesh, distribution, sharding, dtype,
                              seed, kwargs, f"{cls.__name__}.from_preset")
        task.backbone = cls(task)
        return task.backbone

    @property
    def class_name(self):
        return self._task._class_name

    def count_params(self):
        return self._task.count_params()

    def save_to_preset(self, preset_dir, max_shard_size=10):
        """Writes the preset (config.json, model.weights.h5, the task files and
        the tokenizer's); see CausalLM.save_to_preset."""
        self._task.save_to_preset(preset_dir, max_shard_size)

    # KerasHub's LoRA targets (Backbone.get_lora_target_names): the attention's
    # query and value projections.
    _LORA_TARGETS = ("query_dense", "value_dense", "query", "value")

    def enable_lora(self, rank, target_names=None, *, lora_alpha=None):
        """KerasHub's Backbone.enable_lora: LoRA adapters of ``rank`` on the
        query and value projections (Keras's EinsumDense.enable_lora:
        kernel + lora_alpha / rank * lora_kernel_a @ lora_kernel_b, b from
        zeros, ``lora_alpha`` defaulting to ``rank``), every other weight
        of the backbone frozen: ``fit`` then trains the adapters (and a
        TextClassifier's head, which is not the backbone's) only, and
        ``generate`` runs with them. Every family: GPT-2, OPT, BERT,
        RoBERTa and the Llama family (Llama, Llama 3, Mistral, Qwen, Gemma)."""
        where = f"{type(self).__name__}.enable_lora"
        if target_names is not None and not set(target_names) <= set(self._LORA_TARGETS):
            raise NotImplementedError(f"{where}: autoshard puts adapters on the query and value "
                                      f"projections only ({', '.join(self._LORA_TARGETS)}), "
                                      f"not {sorted(set(target_names))}")
        rank = _checks.integer(rank, "rank", where, 1, _checks.INT32_MAX)
        alpha = rank if lora_alpha is None else _checks.number(lora_alpha, "lora_alpha", where,
                                                              above=0)
        self._task._native.enable_lora(rank, float(alpha))
        self._task._optimizer = None  # a new optimizer for the adapters alone

    def save_lora_weights(self, filepath):
        """KerasHub's Backbone.save_lora_weights (keras_hub/src/models/
        backbone.py): the adapters in an HDF5 file whose name ends in
        ``.lora.h5``, laid out as KerasHub's (Keras's H5IOStore):
        ``lora/vars/rank`` and, per adapted layer i, ``lora/i/vars/
        lora_kernel_a`` and ``lora_kernel_b``. autoshard numbers the layers
        query then value of each transformer layer in turn (KerasHub by its
        own walk of the layers: docs/keras-hub.md, "LoRA files"). A file
        already at ``filepath`` is never replaced (FileExistsError): the new
        file is written beside it and linked into place whole."""
        from ..keras import _model_files

        where = f"{type(self).__name__}.save_lora_weights"
        native = self._task._native
        if not getattr(native, "lora_rank", 0):
            raise ValueError(f"{where}: there are no LoRA-enabled layers in this model; call "
                             "enable_lora(rank) first")
        path = _model_files._path(filepath, where)
        if not path.endswith(".lora.h5"):
            raise ValueError(f"{where}: the filename must end in .lora.h5 (KerasHub's rule); "
                             f"received filepath={path!r}")
        adapters = [(native.weight(s + "lora_kernel_a"), native.weight(s + "lora_kernel_b"))
                    for s in _adapter_scopes(native)]
        _model_files._save_file(
            path, False,
            lambda out: _native.write_lora_h5(out, native.lora_rank, _LORA_ORDER, adapters),
            where)

    def load_lora_weights(self, filepath):
        """KerasHub's Backbone.load_lora_weights: enables LoRA at the file's
        rank (if not enabled; else the ranks must match) and sets each
        adapter from the file written by save_lora_weights."""
        from ..keras import _model_files

        where = f"{type(self).__name__}.load_lora_weights"
        path = _model_files._path(filepath, where)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{where}: no file '{path}'")
        rank, order, adapters = _native.read_lora_h5(path)
        if order != _LORA_ORDER:
            raise ValueError(
                f"{where}: '{path}' numbers its adapters by KerasHub's layer walk (it was not "
                "written by autoshard's save_lora_weights), which autoshard does not map to its "
                "layers; load it in KerasHub and save_to_preset the merged model instead")
        native = self._task._native
        if not getattr(native, "lora_rank", 0):
            self.enable_lora(int(rank))
        elif native.lora_rank != rank:
            raise ValueError(f"{where}: the LoRA rank of '{path}' is {rank}, but the model was "
                             f"given enable_lora(rank={native.lora_rank}); both must match")
        scopes = _adapter_scopes(native)
        if len(scopes) != len(adapters):
            raise ValueError(f"{where}: '{path}' holds {len(adapters)} adapted layers, this "
                             f"model has {len(scopes)}")
        for scope, (a, b) in zip(scopes, adapters):
            for name, value in (("lora_kernel_a", a), ("lora_kernel_b", b)):
                want = tuple(native.weight(scope + name).shape)
                if tuple(value.shape) != want:
                    raise ValueError(f"{where}: '{path}' holds {name} of shape "
                                     f"{tuple(value.shape)} for {scope}{name}, which is {want}")
        for scope, (a, b) in zip(scopes, adapters):
            native.set_weight(scope + "lora_kernel_a", a)
            native.set_weight(scope + "lora_kernel_b", b)

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(
            f"{type(self).__name__}: autoshard runs a backbone with its task's head; call the "
            f"task (keras_hub.models.{_task_name(self.class_name, None).split('.')[-1]}) for "
            "its logits (the backbone's hidden states are not exposed)")

    def __repr__(self):
        return f"<keras_hub.models.{type(self).__name__} ({self.class_name}) on autoshard>"


# The order of save_lora_weights's layer indices (the "lora" group's
# autoshard_adapter_order attribute): each transformer layer's query
# adapter, then its value adapter, layer by layer.
_LORA_ORDER = "query,value per transformer layer"


def _adapter_scopes(native):
    """The adapted projections' weight scopes ("layers.0.self_attn.q_proj.")
    in _LORA_ORDER: by transformer layer, the query before the value."""
    import re

    suffix = "lora_kernel_a"
    scopes = [p[: -len(suffix)] for p in native.weight_paths() if p.endswith("." + suffix)]

    def key(scope):
        layer = re.search(r"\d+", scope)
        value = re.search(r"(^|\.)(v_proj|value)[._]", scope) is not None
        return (int(layer.group()) if layer else -1, value)

    return sorted(scopes, key=key)


class _Task:
    _backbone_classes = None
    _encoder = None
    _base_name = "Task"

    def __init__(self, native, path, class_name, model_type):
        self._native = native
        self._path = path
        self._class_name = class_name
        self.backbone = _BACKBONES.get(class_name, Backbone)(self)
        self._optimizer = None
        self._optimizer_spec = None

    @classmethod
    def from_preset(cls, preset, load_weights=True, *, mesh=None, distribution=None,
                    sharding=None, dtype=None, seed=0, **kwargs):
        """The task of the KerasHub preset directory ``preset``.

        ``mesh``: None (one device), ``"data=2,model=2"`` or a DeviceMesh;
        ``distribution``: a ``keras.distribution.DataParallel`` or
        ``AutoShard`` (default: the one ``set_distribution`` set);
        ``sharding="auto"``: AutoShard's plan (the default plan on a mesh).
        ``dtype``: None or "float32" (bfloat16 presets load as float32), or
        "bfloat16": the frozen weights (LoRA's base, after
        ``backbone.enable_lora``) held in bfloat16, read widened to float32.
        """
        path, config = _preset_dir(preset, cls)
        _check_class(cls, config["class_name"])
        return cls._load(path, config, load_weights, mesh, distribution, sharding, dtype, seed,
                         kwargs, f"{cls.__name__}.from_preset")

    @classmethod
    def _load(cls, path, config, load_weights, mesh, distribution, sharding, dtype, seed, kwargs,
              where):
        raise NotImplementedError

    def count_params(self):
        return self._native.count_params()

    @property
    def mesh(self):
        """The mesh it runs on ("data=1,model=2"), or "" for one device (once built)."""
        return self._native.mesh

    @property
    def plan(self):
        """How the model is laid out now (a PresetPlan: print it): the
        layouts of its first step since it was built (fit's, generate's; a
        forward pass's before any), per KerasHub variable."""
        return PresetPlan(self._native.plan())

    def _compile_native(self):
        from ..keras import optimizers as _optimizers

        spec = self._optimizer_spec
        if spec is None or spec == "auto":
            spec = _optimizers.Adam(self._default_learning_rate)
        self._optimizer = _optimizers.get(spec)
        self._native.compile(self._optimizer._native)

    def save_to_preset(self, preset_dir, max_shard_size=10):
        """Writes a KerasHub preset (Backbone.save_to_preset / Task.save_to_preset:
        config.json, metadata.json, task.json, model.weights.h5 and, for a
        classifier, task.weights.h5), with the tokenizer files of the preset
        it was loaded from. A directory that exists and is not empty is
        refused (FileExistsError), as is a path that is a file: no file of
        the user's is replaced or deleted; the preset appears whole or not
        at all. A backbone of more than ``max_shard_size`` GB (KerasHub's
        argument; None: never) is written in shards as Keras's
        ShardedH5IOStore writes them: model_00000.weights.h5, ... and their
        index model.weights.json."""
        if max_shard_size is not None:
            max_shard_size = _checks.number(max_shard_size, "max_shard_size", "save_to_preset",
                                            above=0)
        directory, _ = _hf._save_target(preset_dir, False)
        self._native.save_preset(directory, False, float(max_shard_size or 0))

    def __repr__(self):
        return f"<keras_hub.models.{type(self).__name__} ({self._class_name}) from {self._path!r}>"


def _bfloat16(dtype, where):
    """from_preset's ``dtype``: None or "float32" hold every weight in
    float32; "bfloat16" (KerasHub's fine-tuning dtype) holds the frozen
    weights in bfloat16, half their bytes: once ``backbone.enable_lora``
    froze the base, its projection kernels and embedding table (the weights
    only products and gathers read) are rounded to bfloat16 and read widened
    to float32, while the adapters, norms, biases, optimizer state and the
    arithmetic stay float32 (Model::hold_frozen_weights_in_bf16)."""
    if dtype is None:
        return False
    name = getattr(dtype, "name", None) or getattr(dtype, "__name__", None) or str(dtype)
    if name == "bfloat16":
        return True
    if name in ("float32", "F32", "f32"):
        return False
    raise ValueError(f"{where}: dtype {name!r}: the engine computes in float32 and holds the "
                     "weights in float32, or the frozen ones (LoRA's base) in bfloat16; pass "
                     "dtype='float32' or 'bfloat16', or leave it out")


def _check_loss(loss, what):
    """compile's loss: "auto", its name, or the object KerasHub's guides pass,
    ``keras.losses.SparseCategoricalCrossentropy(from_logits=True)`` (the
    tasks' "auto" in causal_lm.py, text_classifier.py, masked_lm.py); the
    engine trains on that loss only."""
    spec = getattr(loss, "_spec", None)
    if isinstance(loss, str) and loss in ("auto", "sparse_categorical_crossentropy"):
        return
    if spec is not None and spec[:3] == ("sparse_categorical_crossentropy", True, 0.0):
        return
    raise ValueError(f"compile: {what} trains on the sparse categorical cross-entropy of its "
                     "logits (loss=\"auto\", or keras.losses.SparseCategoricalCrossentropy("
                     f"from_logits=True)), not {_checks.shown(loss)}")


def _batches(n, batch_size, shuffle, epoch, seed):
    import numpy as np

    order = np.arange(n)
    if shuffle:
        np.random.default_rng([seed, epoch]).shuffle(order)
    return [order[i:i + batch_size] for i in range(0, n, batch_size)]


def _int_array(value, what, where, rank):
    import numpy as np

    a = np.asarray(value)
    if a.ndim != rank or (a.size and a.dtype.kind not in "iu"):
        raise ValueError(f"{where}: {what} must be an integer array of rank {rank}, not shape "
                         f"{a.shape} and dtype {a.dtype}")
    return a.astype(np.int32)


class CausalLM(_Task):
    """A KerasHub causal language model, ``keras_hub.models.<Family>CausalLM``
    (or ``CausalLM``, any decoder family)."""

    _encoder = False
    _base_name = "CausalLM"
    _default_learning_rate = 2e-5  # CausalLM.compile's optimizer="auto": Adam(2e-5)

    def __init__(self, native, path, class_name, model_type):
        super().__init__(native, path, class_name, model_type)
        self.tokenizer = _tokenizer(path)
        self._tokenizer_class = _tokenizer_class(path)
        self.sampler = _samplers.get("top_k")  # CausalLM.compile's default
        self.seed = 0

    @classmethod
    def _load(cls, path, config, load_weights, mesh, distribution, sharding, dtype, seed, kwargs,
              where):
        kwargs.pop("preprocessor", None)  # the preset's tokenizer, when it has one
        if kwargs:
            raise ValueError(f"{where}: unsupported argument(s) {', '.join(sorted(kwargs))}")
        bf16 = _bfloat16(dtype, where)
        placement = _placement(path, mesh, distribution, sharding, where)
        seed = _hf._seed(seed, where)
        native = _hf._OneCallAtATime(
            _native.LanguageModel(path, bool(load_weights), seed, *placement.args()))
        native.hold_frozen_in_bf16(bf16)
        model = cls(native, path, config["class_name"], native.model_type)
        model.seed = seed
        return model

    @property
    def vocab_size(self):
        return self._native.vocab_size

    def compile(self, optimizer="auto", loss="auto", *, weighted_metrics="auto", sampler="top_k",
                **kwargs):
        """CausalLM.compile: the optimizer of fit ("auto": Adam(2e-5)), the
        loss (only "auto", sparse categorical cross-entropy of the logits)
        and generate's sampler ("greedy", "top_k", "top_p", "random" or a
        keras_hub.samplers object)."""
        for k in ("jit_compile", "metrics"):
            kwargs.pop(k, None)
        if kwargs:
            raise ValueError(f"compile: unsupported argument(s) {', '.join(sorted(kwargs))}")
        _check_loss(loss, "a CausalLM")
        self.sampler = _samplers.get(sampler)
        self._optimizer_spec = optimizer
        self._optimizer = None

    # generate

    def _stop_ids(self, stop_token_ids):
        if stop_token_ids is None:
            return []
        if isinstance(stop_token_ids, str) and stop_token_ids == "auto":
            tokens = _END_TOKENS.get(self._tokenizer_class)
            if self.tokenizer is None or tokens is None:
                why = ("has no tokenizer" if self.tokenizer is None else
                       f"has a {self._tokenizer_class}, whose end token autoshard does not know")
                raise ValueError(
                    'generate: stop_token_ids="auto" stops at the tokenizer\'s end token, and '
                    f"this preset {why}; pass stop_token_ids=None to generate up to max_length, "
                    "or a tuple of token ids to stop at")
            ids = [self.tokenizer.token_to_id(t) for t in tokens]
            return [i for i in ids if i is not None]
        return [_checks.integer(i, "stop_token_ids", "generate", 0, self.vocab_size - 1)
                for i in stop_token_ids]

    def _continue(self, prompt, max_length, stop):
        """The new ids after ``prompt`` (a list of ids), up to ``max_length`` in all."""
        temperature, top_k, top_p, seed = self.sampler._options()
        new = max(max_length - len(prompt), 0)
        return self._native.generate(prompt, new, temperature, top_k, top_p,
                                     self.seed if seed is None else _hf._seed(seed, "generate"),
                                     stop, None)

    def generate(self, inputs, max_length=None, stop_token_ids="auto", strip_prompt=False):
        """CausalLM.generate: text (a string or a list of them, through the
        preset's tokenizer) or KerasHub's preprocessed dict ``{"token_ids",
        "padding_mask"}`` of shape [batch, max_length] whose padding_mask
        marks each row's prompt (a prefix). Text gives text (the prompt and
        its continuation, or the continuation alone with strip_prompt); a
        dict gives the dict filled in, padding_mask marking the tokens up to
        and including the stop token. ``max_length`` (text only; default
        preprocessor.json's sequence_length, else the model's positions) is
        the length of prompt and continuation together."""
        stop = self._stop_ids(stop_token_ids)
        if isinstance(inputs, dict):
            return self._generate_ids(inputs, stop)
        single = isinstance(inputs, str)
        prompts = [inputs] if single else list(inputs)
        if not all(isinstance(p, str) for p in prompts):
            raise TypeError("generate: inputs must be text, a list of texts, or a dict of "
                            "token_ids and padding_mask")
        if self.tokenizer is None:
            raise ValueError("generate: this preset has no tokenizer (tokenizer.json and "
                             "assets/), so it takes token ids: a dict of token_ids and "
                             "padding_mask")
        if max_length is None:
            max_length = min(_sequence_length(self._path) or self._native.max_positions,
                             self._native.max_positions)
        max_length = _checks.integer(max_length, "max_length", "generate", 1,
                                     self._native.max_positions)
        out = []
        for text in prompts:
            ids = self.tokenizer.encode(text)
            new = self._continue(ids, max_length, stop)
            out.append(self.tokenizer.decode(new if strip_prompt else ids + new))
        return out[0] if single else out

    def _generate_ids(self, inputs, stop):
        import numpy as np

        token_ids, mask = _lm_inputs(inputs, "generate")
        out, done = token_ids.copy(), np.zeros_like(mask)
        for row in range(token_ids.shape[0]):
            n = int(mask[row].sum())
            if not mask[row, :n].all() or n == 0:
                raise ValueError(f"generate: row {row}'s padding_mask must mark its prompt, a "
                                 "non-empty prefix (1s, then 0s where tokens are generated)")
            new = self._continue([int(i) for i in token_ids[row, :n]], token_ids.shape[1], stop)
            out[row, n:n + len(new)] = new
            # causal_lm.py generate_step: the mask ends after the first stop token.
            ended = [i for i, t in enumerate(new) if t in stop]
            done[row, :n + (ended[0] + 1 if ended else len(new))] = 1
        return {"token_ids": out, "padding_mask": done.astype(bool)}

    # logits, fit, evaluate

    def __call__(self, inputs):
        """The logits [batch, tokens, vocabulary] of ``{"token_ids", ...}``."""
        token_ids, _ = _lm_inputs(inputs, "call")
        return self._native.logits(token_ids)

    def predict(self, x, batch_size=None, verbose="auto", **kwargs):
        """The logits of the dict ``x`` (as calling the model)."""
        return self(x)

    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", sample_weight=None,
            shuffle=True, **kwargs):
        """Keras's fit on KerasHub's preprocessed batches: ``x``
        ``{"token_ids", "padding_mask"}`` [n, tokens], ``y`` the next tokens
        [n, tokens]. Each position's loss is weighted by ``sample_weight``
        ([n, tokens] or [n]; the CausalLMPreprocessor's third output), else
        by ``padding_mask``, so padded positions add nothing (as KerasHub's
        preprocessor gives sample_weight=padding_mask); padding is on the
        right, as KerasHub's preprocessors pad. Batches of ``batch_size``
        (default 32) in an order shuffled per epoch from the model's seed.
        Returns a History."""
        import numpy as np

        if kwargs:
            raise ValueError(f"fit: unsupported argument(s) {', '.join(sorted(kwargs))}")
        x, y, w = self._xy(x, y, sample_weight, "fit")
        batch_size = _checks.integer(32 if batch_size is None else batch_size, "batch_size",
                                     "fit", 1, _checks.INT32_MAX)
        epochs = _checks.integer(epochs, "epochs", "fit", 0, _checks.INT32_MAX)
        if self._optimizer is None:
            self._compile_native()
        history = History()
        for epoch in range(epochs):
            losses, sizes = [], []
            for rows in _batches(len(x), batch_size, shuffle, epoch, self.seed):
                losses.append(self._native.train_on_batch(
                    x[rows], y[rows], None if w is None else w[rows]))
                sizes.append(len(rows))
            history.steps += losses
            history.epoch.append(epoch)
            history.history["loss"].append(float(np.average(losses, weights=sizes)))
        return history

    def _xy(self, x, y, sample_weight, where):
        import numpy as np

        if not isinstance(x, dict):
            raise ValueError(f"{where}: x must be KerasHub's preprocessed dict "
                             "{\"token_ids\", \"padding_mask\"} (autoshard does not preprocess "
                             "text for training)")
        token_ids, mask = _lm_inputs(x, where)
        if y is None:
            raise ValueError(f"{where}: give y, the next token of each position (token_ids "
                             "shifted left by one), as for a CausalLM without its preprocessor")
        y = _int_array(y, "y", where, 2)
        if y.shape != token_ids.shape:
            raise ValueError(f"{where}: y has shape {y.shape}, token_ids {token_ids.shape}; "
                             "give one target per token")
        return token_ids, y, _position_weights(mask, sample_weight, y.shape, where)

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None,
                 return_dict=False, **kwargs):
        """The loss (Keras's sparse categorical cross-entropy, with
        ``sample_weight`` summed over every position and divided by their
        number: keras/src/losses/loss.py ``reduce_values``) and the weighted
        accuracy, as KerasHub's CausalLM.compile reports them."""
        import numpy as np

        if kwargs:
            raise ValueError(f"evaluate: unsupported argument(s) {', '.join(sorted(kwargs))}")
        token_ids, y, w = self._xy(x, y, sample_weight, "evaluate")
        w = np.ones(y.shape) if w is None else w.astype(np.float64)
        logits = self._native.logits(token_ids).astype(np.float64)
        top = logits.max(-1, keepdims=True)
        log_z = np.log(np.exp(logits - top).sum(-1)) + top[..., 0]
        picked = np.take_along_axis(logits, y[..., None], -1)[..., 0]
        loss = float(((log_z - picked) * w).sum() / y.size)
        hits = (logits.argmax(-1) == y) * w
        accuracy = float(hits.sum() / w.sum()) if w.sum() else 0.0
        result = {"loss": loss, "sparse_categorical_accuracy": accuracy}
        return result if return_dict else [loss, accuracy]


def _position_weights(mask, sample_weight, shape, where):
    """Each position's loss weight [n, tokens] (float32), or None when all
    are 1 (the unweighted loss: the same value, without the one-hot targets
    the weighted one needs): ``sample_weight`` ([n, tokens], or [n] spread
    over each sequence) if given, else ``padding_mask``. The mask must pad on
    the right (1s, then 0s), as KerasHub's preprocessors do: the engine's
    causal attention lets no position see a later one, so right padding
    changes nothing before it; left padding would need the mask in the
    attention."""
    import numpy as np

    ends = mask.sum(1)
    if np.any(mask != (np.arange(mask.shape[1]) < ends[:, None])):
        raise ValueError(f"{where}: padding_mask must pad each sequence on the right (1s, then "
                         "0s), as KerasHub's CausalLMPreprocessor does; left-padded or gapped "
                         "masks are not supported")
    if sample_weight is None:
        w = mask.astype(np.float32)
    else:
        w = np.asarray(sample_weight, dtype=np.float32)
        if w.ndim == 1 and w.shape[0] == shape[0]:
            w = np.repeat(w[:, None], shape[1], 1)
        if w.shape != tuple(shape):
            raise ValueError(f"{where}: sample_weight has shape {w.shape}; give one weight per "
                             f"token {tuple(shape)} or per sequence ({shape[0]},)")
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError(f"{where}: sample_weight must be finite and 0 or more")
    return None if np.all(w == 1) else w


def _lm_inputs(inputs, where):
    import numpy as np

    if not isinstance(inputs, dict) or "token_ids" not in inputs:
        raise ValueError(f"{where}: give KerasHub's dict {{\"token_ids\", \"padding_mask\"}}, "
                         f"not {_checks.shown(inputs)}")
    unknown = set(inputs) - {"token_ids", "padding_mask"}
    if unknown:
        raise ValueError(f"{where}: unknown input(s) {', '.join(sorted(unknown))}; a CausalLM "
                         "takes token_ids and padding_mask")
    token_ids = _int_array(inputs["token_ids"], "token_ids", where, 2)
    mask = inputs.get("padding_mask")
    mask = np.ones(token_ids.shape, np.int32) if mask is None else np.asarray(mask).astype(
        np.int32)
    if mask.shape != token_ids.shape:
        raise ValueError(f"{where}: padding_mask has shape {mask.shape}, token_ids "
                         f"{token_ids.shape}")
    return token_ids, mask


class TextClassifier(_Task):
    """KerasHub's BERT and RoBERTa classifiers,
    ``keras_hub.models.<Family>TextClassifier`` (or ``TextClassifier``): the
    backbone and the head of the preset's task.json and task.weights.h5."""

    _encoder = True
    _base_name = "TextClassifier"
    _default_learning_rate = 5e-5  # TextClassifier.compile's "auto": Adam(5e-5)

    @classmethod
    def _load(cls, path, config, load_weights, mesh, distribution, sharding, dtype, seed, kwargs,
              where):
        num_classes = kwargs.pop("num_classes", None)
        kwargs.pop("preprocessor", None)
        if kwargs:
            raise ValueError(f"{where}: unsupported argument(s) {', '.join(sorted(kwargs))}")
        if not load_weights:
            raise ValueError(f"{where}: load_weights=False is not supported for encoders")
        bf16 = _bfloat16(dtype, where)
        placement = _placement(path, mesh, distribution, sharding, where)
        seed = _hf._seed(seed, where)
        if num_classes is not None:
            num_classes = _checks.integer(num_classes, "num_classes", where, 1,
                                          _checks.INT32_MAX)
        # num_classes other than the preset's head's: a fresh head of that
        # many classes on the preset's backbone (KerasHub's Task.from_preset
        # builds the task anew around the loaded backbone).
        native = _hf._OneCallAtATime(_native.Encoder(path, seed, *placement.args(),
                                                     num_labels=num_classes or 0,
                                                     masked_lm=False))
        native.hold_frozen_in_bf16(bf16)
        model = cls(native, path, config["class_name"], native.model_type)
        model.tokenizer = _tokenizer(path)
        model.seed = seed
        return model

    @property
    def num_classes(self):
        return self._native.num_labels

    @property
    def vocab_size(self):
        return self._native.vocab_size

    def compile(self, optimizer="auto", loss="auto", *, metrics="auto", **kwargs):
        """TextClassifier.compile: the optimizer ("auto": Adam(5e-5)); the
        loss is the sparse categorical cross-entropy of the logits."""
        for k in ("jit_compile", "weighted_metrics"):
            kwargs.pop(k, None)
        if kwargs:
            raise ValueError(f"compile: unsupported argument(s) {', '.join(sorted(kwargs))}")
        _check_loss(loss, "a TextClassifier")
        self._optimizer_spec = optimizer
        self._optimizer = None

    def __call__(self, inputs):
        """The logits [batch, num_classes] of ``{"token_ids", "segment_ids",
        "padding_mask"}`` (segment_ids and padding_mask optional)."""
        return self._native.logits(*_encoder_inputs(inputs, "call"))

    def predict(self, x, batch_size=None, verbose="auto", **kwargs):
        return self(x)

    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", shuffle=True,
            **kwargs):
        """Keras's fit on the dict ``x`` and class ids ``y`` [n]; a History."""
        import numpy as np

        if kwargs:
            raise ValueError(f"fit: unsupported argument(s) {', '.join(sorted(kwargs))}")
        inputs = _encoder_inputs(x, "fit")
        if y is None:
            raise ValueError("fit: give y, the class id of each sequence")
        y = _int_array(y, "y", "fit", 1)
        batch_size = _checks.integer(32 if batch_size is None else batch_size, "batch_size",
                                     "fit", 1, _checks.INT32_MAX)
        epochs = _checks.integer(epochs, "epochs", "fit", 0, _checks.INT32_MAX)
        if self._optimizer is None:
            self._compile_native()
        history = History()
        for epoch in range(epochs):
            losses, sizes = [], []
            for rows in _batches(len(y), batch_size, shuffle, epoch, self.seed):
                part = [a[rows] for a in inputs]
                losses.append(self._native.train_on_batch(*part, y[rows]))
                sizes.append(len(rows))
            history.steps += losses
            history.epoch.append(epoch)
            history.history["loss"].append(float(np.average(losses, weights=sizes)))
        return history

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", return_dict=False,
                 **kwargs):
        """The loss (sparse categorical cross-entropy of the logits) and the
        accuracy."""
        import numpy as np

        if kwargs:
            raise ValueError(f"evaluate: unsupported argument(s) {', '.join(sorted(kwargs))}")
        y = _int_array(y, "y", "evaluate", 1)
        logits = np.asarray(self(x), dtype=np.float64)
        top = logits.max(-1, keepdims=True)
        log_z = np.log(np.exp(logits - top).sum(-1)) + top[..., 0]
        loss = float((log_z - logits[np.arange(len(y)), y]).mean())
        accuracy = float((logits.argmax(-1) == y).mean())
        result = {"loss": loss, "sparse_categorical_accuracy": accuracy}
        return result if return_dict else [loss, accuracy]


def _encoder_inputs(inputs, where, extra=(), task="TextClassifier"):
    """token_ids, segment_ids (zeros if absent) and padding_mask (ones if
    absent) [n, tokens] of KerasHub's dict, checked; ``extra`` keys (a
    MaskedLM's mask_positions) must be there too and are left to the caller."""
    import numpy as np

    names = ["token_ids", "segment_ids", "padding_mask", *extra]
    listed = ", ".join(names[:-1]) + " and " + names[-1]
    if not isinstance(inputs, dict) or not {"token_ids", *extra} <= set(inputs):
        shown = ", ".join(f'"{k}"' for k in names)
        raise ValueError(f"{where}: give KerasHub's dict {{{shown}}}, not "
                         f"{_checks.shown(inputs)}")
    unknown = set(inputs) - set(names)
    if unknown:
        raise ValueError(f"{where}: unknown input(s) {', '.join(sorted(unknown))}; a "
                         f"{task} takes {listed}")
    token_ids = _int_array(inputs["token_ids"], "token_ids", where, 2)
    segments = inputs.get("segment_ids")
    segments = np.zeros_like(token_ids) if segments is None else _int_array(
        segments, "segment_ids", where, 2)
    mask = inputs.get("padding_mask")
    mask = np.ones(token_ids.shape, np.float32) if mask is None else np.asarray(
        mask, dtype=np.float32)
    return token_ids, segments, mask


def _family_classes():
    """A Backbone and a task class for each backbone class the registry has."""
    classes = {}
    for backbone, encoder in _native.keras_hub_backbones():
        family = backbone[: -len("Backbone")]
        # KerasHub's Llama3Backbone subclasses LlamaBackbone: Llama's classes take it.
        accepted = (backbone, "Llama3Backbone") if backbone == "LlamaBackbone" else (backbone,)
        attrs = {"_backbone_classes": accepted, "__module__": __name__}
        classes[backbone] = type(backbone, (Backbone,), dict(attrs, _encoder=encoder))
        base = TextClassifier if encoder else CausalLM
        task = f"{family}{'TextClassifier' if encoder else 'CausalLM'}"
        classes[task] = type(task, (base,), attrs)
    return classes


_CLASSES = _family_classes()
_BACKBONES = {k: v for k, v in _CLASSES.items() if k.endswith("Backbone")}
globals().update(_CLASSES)
__all__ += sorted(_CLASSES)


from .masked_lm import (BertMaskedLM, BertMaskedLMPreprocessor, MaskedLM,  # noqa: E402
                        MaskedLMPreprocessor)  # (they build on the classes above)

__all__ += ["MaskedLM", "BertMaskedLM", "MaskedLMPreprocessor", "BertMaskedLMPreprocessor"]


def __getattr__(name):
    if name.endswith(("Backbone", "CausalLM", "TextClassifier", "MaskedLM", "Preprocessor",
                      "Tokenizer", "Seq2SeqLM")):
        raise AttributeError(
            f"keras_hub.models.{name}: autoshard has no such KerasHub class; it has the "
            f"families of the backbones {_known()} (their Backbone, CausalLM or "
            "TextClassifier classes) and BertMaskedLM")
    raise AttributeError(f"module 'autoshard.keras_hub.models' has no attribute '{name}'")
