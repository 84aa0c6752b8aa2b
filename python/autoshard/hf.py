"""Hugging Face language models: ``autoshard.from_pretrained(path, mesh=...)``.

What ``autoshard generate`` and ``autoshard train`` do, from Python::

    model = autoshard.from_pretrained("path/to/llama", mesh="model=2")
    print(model.generate("Once upon a time", max_new_tokens=20, temperature=0))
    losses = model.fit(tokens, batch_size=8, seq_len=64, steps=100)

Every decoder the command line knows: GPT-2, Llama, Mistral, Qwen2, Gemma (1, 2)
and OPT (the directory's config.json names it); BERT and RoBERTa directories
give an EncoderModel (logits of its classification or masked-LM head). The same directory, options
and seed give the same ids and losses as the commands (bit for bit on one
device). Under ``mpirun -np N python3 script.py`` each process is one rank:
a mesh of N devices runs one device per process (docs/mpi.md).
"""

import json
import os

from . import _checks, _native
from .tokenizer import Tokenizer

__all__ = ["EncoderModel", "LanguageModel", "from_pretrained", "world_rank", "world_size"]


def _mesh_spec(mesh):
    """None, "data=2,model=2", or a DeviceMesh (autoshard.keras's or the engine's)."""
    if mesh is None:
        return ""
    if isinstance(mesh, str):
        return mesh
    shape = getattr(mesh, "shape", None)
    names = getattr(mesh, "axis_names", None)
    if shape is None or names is None:
        raise ValueError(f"mesh must be None, a string like 'model=2' or a DeviceMesh, not "
                         f"{type(mesh).__name__}")
    return ",".join(f"{n}={int(s)}" for n, s in zip(names, shape))


def _check_dtype(dtype):
    name = getattr(dtype, "name", None) or getattr(dtype, "__name__", None) or str(dtype)
    if name not in ("float32", "F32", "f32"):
        raise ValueError(f"dtype {name!r}: the engine computes in float32 (F16 and BF16 weights "
                         "are converted when loaded); pass dtype='float32' or leave it out")


def _eos_tokens(path):
    """The config's eos_token_id (an id, a list, or null), as generate stops at it."""
    config = os.path.join(path, "config.json") if os.path.isdir(path) else path
    if not config.endswith(".json") or not os.path.isfile(config):
        return []
    j = _checks.read_json(config, "model config")
    eos = j.get("eos_token_id") if isinstance(j, dict) else None
    if eos is None:
        return []
    ids = eos if isinstance(eos, list) else [eos]
    for i in ids:
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i <= 2**31 - 1:
            raise ValueError(f"model config '{config}': \"eos_token_id\" {json.dumps(eos)} must "
                             "be a token id (a whole number from 0 to 2147483647) or a list of "
                             "them")
    return ids


def _directory_tokenizer(path):
    directory = path if os.path.isdir(path) else os.path.dirname(path)
    if directory and _native.has_tokenizer(directory):
        return Tokenizer(_native.load_tokenizer(directory))
    return None


def _token_list(ids, what):
    """A list of ints from a list, tuple or 1-D integer array."""
    try:
        import numpy as np

        a = np.asarray(ids)
        if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
            raise ValueError(f"{what} must be text or a 1-D sequence of token ids, not an array "
                             f"of shape {a.shape} and dtype {a.dtype}")
        return [int(i) for i in a]
    except ImportError:  # pragma: no cover (NumPy comes with the package)
        return [int(i) for i in ids]


def _check_ids(ids, vocab, what):
    """Refuses token ids outside the vocabulary (the engine's message would
    name neither the argument nor the vocabulary)."""
    import numpy as np

    a = np.asarray(ids)
    if a.size and a.dtype.kind in "iu" and (a.min() < 0 or a.max() >= vocab):
        bad = a.min() if a.min() < 0 else a.max()
        raise ValueError(f"{what}: token id {bad} is outside the model's vocabulary "
                         f"of {vocab} (ids 0 to {vocab - 1})")


def _seed(seed, what):
    return _checks.integer(seed, "seed", what, 0, 2**64 - 1)


def _placement(seed, devices, memory_per_device, what):
    # from_pretrained's and from_config's numbers, as the extension takes them.
    return (_seed(seed, what), _checks.integer(devices, "devices", what, 0, _checks.INT32_MAX),
            _checks.number(memory_per_device, "memory_per_device", what, minimum=0))


def _callable(f, name, what):
    if f is not None and not callable(f):
        raise TypeError(f"{what}: {name} must be a function or None, got {_checks.shown(f)}")
    return f


class _OneCallAtATime:
    """The extension's model, each method call under the model's lock: the
    engine releases the GIL while it runs and its model is not safe for use
    from two threads at once (two generate() calls crashed the interpreter).
    Re-entrant: on_token and on_step run on the calling thread."""

    def __init__(self, native):
        import threading

        self._wrapped = native
        self._lock = threading.RLock()

    def __getattr__(self, name):
        value = getattr(self._wrapped, name)
        if not callable(value):
            return value

        def call(*args, **kwargs):
            with self._lock:
                return value(*args, **kwargs)

        return call


class LanguageModel:
    """A decoder language model on the engine (made by :func:`from_pretrained`).

    ``tokenizer`` is the directory's tokenizer (None when it has none; a
    vocabulary of 256 then reads text as bytes, as the command line does).
    """

    def __init__(self, native, path, tokenizer, seed):
        self._native = _OneCallAtATime(native)
        self._path = path
        self.tokenizer = tokenizer
        self.seed = seed
        self._eos = _eos_tokens(path) if path else []

    @classmethod
    def from_config(cls, config, mesh=None, devices=0, plan="auto", seed=0, cluster="cpu",
                    memory_per_device=0):
        """A model of initial (seeded) weights: a GPT-2 preset name ("tiny",
        "mini", ...), a config.json or a directory holding one (``autoshard
        train --model``)."""
        seed, devices, memory_per_device = _placement(seed, devices, memory_per_device,
                                                      "from_config")
        native = _native.LanguageModel(str(config), False, seed, _mesh_spec(mesh), devices,
                                       str(plan), str(cluster), memory_per_device)
        path = str(config) if os.path.exists(str(config)) else ""
        return cls(native, path, _directory_tokenizer(path) if path else None, int(seed))

    @property
    def vocab_size(self):
        return self._native.vocab_size

    @property
    def max_positions(self):
        """The most tokens a sequence may hold (n_positions, max_position_embeddings)."""
        return self._native.max_positions

    @property
    def model_type(self):
        return self._native.model_type

    @property
    def mesh(self):
        """The mesh it runs on ("data=1,model=2"), or "" for one device (once built)."""
        return self._native.mesh

    def count_params(self):
        return self._native.count_params()

    def __repr__(self):
        return (f"<autoshard.LanguageModel {self.model_type} from {self._path or 'a preset'!r}, "
                f"vocabulary {self.vocab_size}>")

    def _encode(self, text):
        if self.tokenizer is not None:
            return self.tokenizer.encode(text)
        if self.vocab_size == 256:
            return list(text.encode("utf-8"))
        raise ValueError(f"prompt: this model's vocabulary of {self.vocab_size} tokens needs a "
                         "tokenizer (tokenizer.json, tokenizer.model, vocab.json + merges.txt or "
                         "vocab.txt) in its directory; add one, or give the token ids")

    def _decode(self, ids):
        if self.tokenizer is not None:
            return self.tokenizer.decode(ids)
        return bytes(ids).decode("utf-8", errors="replace")

    def generate(self, prompt, max_new_tokens=32, temperature=1.0, top_k=0, top_p=1.0, seed=None,
                 ignore_eos=False, on_token=None):
        """Continues ``prompt`` (``autoshard generate``).

        ``prompt`` is text (through the directory's tokenizer) or token ids.
        Text gives text: the prompt and its continuation (as the command's
        ``--json`` "text"); ids give the new ids only ("output_ids").
        ``temperature`` 0 is greedy; ``top_k`` 0 and ``top_p`` 1 keep every
        token. Generation stops after the config's ``eos_token_id`` unless
        ``ignore_eos``. ``seed`` (default: the model's) seeds the sampling.
        ``on_token(id)`` sees each new id as it is chosen. Ctrl-C stops at
        the next token and raises KeyboardInterrupt.
        """
        as_text = isinstance(prompt, str)
        ids = self._encode(prompt) if as_text else _token_list(prompt, "prompt")
        if as_text and not ids:
            raise ValueError("prompt: the text gives no tokens")
        _check_ids(ids, self.vocab_size, "generate: prompt")
        where = "generate"
        out = self._native.generate(
            ids, _checks.integer(max_new_tokens, "max_new_tokens", where, 0, _checks.INT32_MAX),
            _checks.number(temperature, "temperature", where, minimum=0),
            _checks.integer(top_k, "top_k", where, 0, _checks.INT32_MAX),
            _checks.number(top_p, "top_p", where, above=0, maximum=1),
            self.seed if seed is None else _seed(seed, where),
            [] if ignore_eos else self._eos, _callable(on_token, "on_token", where))
        return self._decode(ids + out) if as_text else out

    def logits(self, ids):
        """The logits, a float32 array [batch, tokens, vocab], of token ids
        [batch, tokens] (or [tokens]: then [tokens, vocab])."""
        import numpy as np

        a = np.asarray(ids)
        _check_ids(a, self.vocab_size, "logits: ids")
        if a.ndim == 1:
            return self._native.logits(a.reshape(1, -1))[0]
        return self._native.logits(a)

    __call__ = logits

    def fit(self, tokens, batch_size=8, seq_len=None, steps=None, epochs=None, learning_rate=None,
            lr_schedule="cosine", warmup=None, weight_decay=0.1, clipnorm=1.0, sampling="random",
            seed=None, on_step=None):
        """Trains on a stream of token ids (``autoshard train``); returns each
        step's loss (a list of floats).

        ``tokens``: a 1-D integer array or list, or text (through the
        directory's tokenizer, or bytes for a vocabulary of 256);
        batches of ``batch_size`` rows of ``seq_len`` tokens (default
        min(128, positions)), the targets shifted by one. ``steps`` steps,
        or ``epochs`` passes over the tokens' whole batches. AdamW (beta_2
        0.95) at ``learning_rate`` (default 6e-3 for byte vocabularies, 6e-4
        otherwise), a cosine schedule with ``warmup`` steps (default 5%, at
        most 100) unless ``lr_schedule="constant"``, ``weight_decay`` and
        ``clipnorm`` as the command's --weight-decay and --clip; windows at
        random offsets drawn from ``seed`` (default: the model's) or
        ``sampling="sequential"``. Each call starts a new optimizer from the
        current weights. ``on_step(step, loss)`` runs after each step;
        Ctrl-C stops after the current step and raises KeyboardInterrupt
        (the steps taken are kept).
        """
        import numpy as np

        if isinstance(tokens, str):  # as train --data reads a text file
            tokens = self._encode(tokens)
        ids = np.asarray(tokens)
        if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
            raise ValueError(f"fit: tokens must be a 1-D array of token ids, not shape "
                             f"{ids.shape} and dtype {ids.dtype}")
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ValueError(f"fit: tokens hold ids from {ids.min()} to {ids.max()}, outside "
                             f"the model's vocabulary of {self.vocab_size}")
        batch_size = _checks.integer(batch_size, "batch_size", "fit", 1, _checks.INT32_MAX)
        seq = 0 if seq_len is None else _checks.integer(seq_len, "seq_len", "fit", 1,
                                                       _checks.INT32_MAX)
        if (steps is None) == (epochs is None):
            raise ValueError("fit: give steps or epochs (one of them)")
        if epochs is not None:
            epochs = _checks.integer(epochs, "epochs", "fit", 0, _checks.INT32_MAX)
            window = batch_size * (seq or min(128, self.max_positions))
            steps = epochs * max(ids.size - 1, 0) // window
        steps = _checks.integer(steps, "steps", "fit", 0, _checks.INT64_MAX)
        return self._native.fit(
            np.ascontiguousarray(ids, dtype=np.int32), batch_size, seq, steps,
            None if learning_rate is None else _checks.number(learning_rate, "learning_rate",
                                                              "fit", above=0),
            str(lr_schedule),
            -1 if warmup is None else _checks.integer(warmup, "warmup", "fit", 0),
            _checks.number(weight_decay, "weight_decay", "fit", minimum=0),
            _checks.number(clipnorm, "clipnorm", "fit", minimum=0), str(sampling),
            self.seed if seed is None else _seed(seed, "fit"),
            _callable(on_step, "on_step", "fit"))

    def save(self, directory, dtype="F32", max_shard_bytes=0, overwrite=False):
        """Writes a Hugging Face directory (``autoshard convert``): config.json
        and model.safetensors (F32, F16 or BF16; shards above
        ``max_shard_bytes``), and the tokenizer files the model came with.
        GPT-2 is written as F32 in one file. A directory that exists and is
        not empty is refused (FileExistsError) unless ``overwrite=True``, and
        even then only the files written are replaced; a path that is a file
        is refused. Under mpirun every rank calls it."""
        directory, overwrite = _save_target(directory, overwrite)
        dtype = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}.get(str(dtype),
                                                                             str(dtype).upper())
        self._native.save(directory, dtype, int(max_shard_bytes), overwrite)
        if self.tokenizer is not None and self._path and _native.world_rank() == 0:
            _copy_tokenizer_files(self._path, directory, overwrite)


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "vocab.json",
                    "merges.txt", "vocab.txt", "special_tokens_map.json")


def _save_target(directory, overwrite):
    """The directory a save writes, checked as the engine checks it (the
    engine refuses too; this gives Python's exception types)."""
    directory, overwrite = os.fspath(directory), bool(overwrite)
    if not isinstance(directory, str) or not directory:
        raise ValueError("save: give the directory to write")
    if os.path.lexists(directory) and not os.path.isdir(directory):
        raise FileExistsError(f"save: '{directory}' is a file; give a directory")
    if os.path.isdir(directory) and os.listdir(directory) and not overwrite:
        raise FileExistsError(
            f"save: '{directory}' exists and is not empty; save into a new or empty directory, "
            "or pass overwrite=True (which replaces only the files the save writes)")
    return directory, overwrite


def _inside(path, root):
    """Whether ``path`` lies inside directory ``root`` after symbolic links (or,
    in a Hugging Face hub cache's snapshots/<revision>/, in its blobs/), as the
    engine's readers require (input_file.h)."""
    real, root = os.path.realpath(path), os.path.realpath(root)
    roots = [root]
    if os.path.basename(os.path.dirname(root)) == "snapshots":
        roots.append(os.path.join(os.path.dirname(os.path.dirname(root)), "blobs"))
    return any(real.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def _copy_tokenizer_files(source, directory, overwrite=False):
    """The model directory's tokenizer files, each written beside its place and
    renamed into it (replacing one there only with ``overwrite``)."""
    import shutil

    source = source if os.path.isdir(source) else os.path.dirname(source)
    for name in _TOKENIZER_FILES:
        path, target = os.path.join(source, name), os.path.join(directory, name)
        if not os.path.isfile(path) or (os.path.lexists(target) and not overwrite):
            continue
        if not _inside(path, source):
            raise ValueError(f"save: the tokenizer file '{path}' is a symbolic link to a file "
                             f"outside '{source}'; refusing to copy it")
        if os.path.isdir(target):
            raise FileExistsError(f"save: '{target}' is a directory where the tokenizer file "
                                  f"{name} goes; move it away")
        tmp = os.path.join(directory, f".{name}.autoshard-{os.getpid()}")
        shutil.copyfile(path, tmp)
        os.replace(tmp, target)


class EncoderModel:
    """A BERT or RoBERTa encoder with its Hugging Face head (made by
    :func:`from_pretrained`): ``*ForSequenceClassification`` gives logits
    [batch, num_labels], ``*ForMaskedLM`` logits [batch, tokens, vocab].
    Encoders do not generate; ``logits`` (or calling the model) runs them.
    """

    def __init__(self, native, path, tokenizer):
        self._native = _OneCallAtATime(native)
        self._path = path
        self.tokenizer = tokenizer

    model_type = property(lambda self: self._native.model_type)
    vocab_size = property(lambda self: self._native.vocab_size)
    num_labels = property(lambda self: self._native.num_labels)
    masked_lm = property(lambda self: self._native.masked_lm)
    max_positions = property(lambda self: self._native.max_positions)

    def __repr__(self):
        head = "masked LM" if self.masked_lm else f"{self.num_labels} labels"
        return f"<autoshard.EncoderModel {self.model_type} ({head}) from {self._path!r}>"

    def logits(self, token_ids, segment_ids=None, padding_mask=None):
        """Logits of token ids [batch, tokens] (or [tokens]); ``segment_ids``
        (default 0) and ``padding_mask`` (1 for a token, 0 for padding at the
        end; default all 1) of the same shape, as Keras-hub names them.
        Text goes through the directory's tokenizer first (one sequence)."""
        import numpy as np

        if isinstance(token_ids, str):
            if self.tokenizer is None:
                raise ValueError("logits: this directory has no tokenizer; give token ids")
            token_ids = self.tokenizer.encode(token_ids)
        ids = np.asarray(token_ids)
        _check_ids(ids, self.vocab_size, "logits: token_ids")
        one = ids.ndim == 1
        extra = [None if a is None else np.asarray(a) for a in (segment_ids, padding_mask)]
        if one:
            ids = ids.reshape(1, -1)
            extra = [None if a is None else a.reshape(1, -1) for a in extra]
        out = self._native.logits(ids, *extra)
        return out[0] if one else out

    __call__ = logits

    def generate(self, *args, **kwargs):
        raise ValueError(f"{self.model_type} is an encoder: it does not generate text (call "
                         "logits(); generate is for the decoders GPT-2, Llama, Mistral, Qwen2, "
                         "Gemma and OPT)")

    def save(self, directory, dtype="F32", max_shard_bytes=0, overwrite=False):
        """Writes a Hugging Face directory (config.json, the weights and the
        tokenizer files). An existing non-empty directory is refused
        (FileExistsError) unless ``overwrite=True``, which replaces only the
        files written; a path that is a file is refused."""
        directory, overwrite = _save_target(directory, overwrite)
        dtype = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}.get(str(dtype),
                                                                             str(dtype).upper())
        self._native.save(directory, dtype, int(max_shard_bytes), overwrite)
        if self.tokenizer is not None and _native.world_rank() == 0:
            _copy_tokenizer_files(self._path, directory, overwrite)


def _model_type(path):
    config = os.path.join(path, "config.json") if os.path.isdir(path) else None
    if config is None or not os.path.isfile(config):
        return None
    try:
        j = _checks.read_json(config, "model config")
    except ValueError:
        return None  # the engine's reader names the problem
    return j.get("model_type") if isinstance(j, dict) else None


def _encoder_preset(path):
    """Whether ``path`` is a KerasHub preset of an encoder (BertBackbone, RobertaBackbone)."""
    config = os.path.join(path, "config.json") if os.path.isdir(path) else None
    if config is None or not os.path.isfile(config):
        return False
    try:
        j = _checks.read_json(config, "model config")
    except ValueError:
        return False
    cls = j.get("class_name") if isinstance(j, dict) else None
    return bool(dict(_native.keras_hub_backbones()).get(cls, False))


def from_pretrained(path, mesh=None, dtype="float32", devices=0, plan="auto", seed=0,
                    cluster="cpu", memory_per_device=0):
    """A decoder (LanguageModel), or for BERT and RoBERTa an EncoderModel,
    from a Hugging Face directory (config.json, model.safetensors
    or its shards, and a tokenizer if any), as ``autoshard generate
    --weights path`` loads it.

    ``mesh``: None (one device; under mpirun one device per rank), a string
    like ``"model=2"`` or ``"data=2,model=2"``, or a DeviceMesh
    (``autoshard.keras.distribution.DeviceMesh``); ``devices=N`` lets
    AutoShard pick the mesh's shape. ``plan``: ``"auto"`` (AutoShard),
    ``"data"``, ``"fsdp"``, ``"megatron"``, ``"megatron-sp"`` or a layout map JSON file,
    as the command's --plan. ``dtype`` must be float32 (what the engine
    computes in). ``seed`` seeds sampling and fit's windows.
    """
    _check_dtype(dtype)
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"from_pretrained: '{path}' does not exist (give a Hugging Face "
                                "model directory)")
    seed, devices, memory_per_device = _placement(seed, devices, memory_per_device,
                                                  "from_pretrained")
    if _model_type(path) in ("bert", "roberta") or _encoder_preset(path):
        native = _native.Encoder(path, seed, _mesh_spec(mesh), devices, str(plan), str(cluster),
                                 memory_per_device)
        return EncoderModel(native, path, _directory_tokenizer(path))
    native = _native.LanguageModel(path, True, seed, _mesh_spec(mesh), devices, str(plan),
                                   str(cluster), memory_per_device)
    return LanguageModel(native, path, _directory_tokenizer(path), seed)


def world_rank():
    """This process's MPI rank (0 when not started by mpirun or srun)."""
    return _native.world_rank()


def world_size():
    """The number of MPI ranks (1 when not started by mpirun or srun)."""
    return _native.world_size()


def _install_mpi_hooks():
    """Under mpirun: MPI ends with the interpreter (MPI_Finalize, as the
    command line does before exiting), and an exception no one catches on
    one rank stops every rank (MPI_Abort) instead of leaving the others
    waiting in a collective."""
    import atexit
    import sys

    atexit.register(_native.world_finalize)
    previous = sys.excepthook

    def excepthook(kind, value, traceback):
        previous(kind, value, traceback)
        if _native.world_size() > 1:
            sys.stderr.flush()
            _native.world_abort(f"{kind.__name__}: {value}")

    sys.excepthook = excepthook


_install_mpi_hooks()
