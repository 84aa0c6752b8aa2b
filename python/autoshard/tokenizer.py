"""Tokenizers: ``autoshard.Tokenizer.from_file(path)`` (what ``autoshard
tokenize`` reads)::

    tok = autoshard.Tokenizer.from_file("path/to/tokenizer.json")
    ids = tok.encode("Hello world")     # [..., ...] with the model's template
    text = tok.decode(ids)              # "Hello world"

Hugging Face ``tokenizer.json`` (byte-level BPE as in GPT-2, Llama 3 and
Qwen2; byte-fallback BPE as in Llama 2, Mistral and Gemma; WordPiece as in
BERT), SentencePiece ``tokenizer.model``, GPT-2's ``vocab.json`` +
``merges.txt`` and BERT's ``vocab.txt`` (docs/models.md has the details).
"""

import os

from . import _native

__all__ = ["Tokenizer"]


class Tokenizer:
    """Text to token ids and back, as a model directory defines it."""

    def __init__(self, native):
        self._native = native

    @classmethod
    def from_file(cls, path):
        """A tokenizer file, or a model directory holding one.

        A directory is read as ``autoshard tokenize --weights`` reads it
        (tokenizer.json first, then tokenizer.model with tokenizer_config.json's
        add_bos_token, vocab.json + merges.txt, vocab.txt with do_lower_case).
        Any ``*.json`` is read as a tokenizer.json, any ``*.model`` as a
        SentencePiece model; ``vocab.json``, ``merges.txt`` and ``vocab.txt``
        are read with the files beside them.
        """
        path = os.fspath(path)
        if os.path.isdir(path):
            return cls(_native.load_tokenizer(path))
        if not os.path.exists(path):
            raise FileNotFoundError(f"Tokenizer.from_file: '{path}' does not exist (give a "
                                    "tokenizer.json, tokenizer.model, vocab.json, merges.txt, "
                                    "vocab.txt or a model directory)")
        name = os.path.basename(path)
        directory = os.path.dirname(path) or "."
        if name in ("vocab.json", "merges.txt"):
            vocab, merges = (os.path.join(directory, n) for n in ("vocab.json", "merges.txt"))
            for other in (vocab, merges):
                if not os.path.isfile(other):
                    raise FileNotFoundError(f"Tokenizer.from_file: '{path}' needs '{other}' "
                                            "beside it (GPT-2's two files)")
            return cls(_native.load_gpt2_tokenizer(vocab, merges))
        if name == "vocab.txt":
            lower = _config_flag(directory, "do_lower_case")
            return cls(_native.load_bert_tokenizer(path, True if lower is None else lower))
        if name.endswith(".model"):
            return cls(_native.load_sentencepiece_tokenizer(path, _add_bos(directory)))
        if name.endswith(".json"):
            return cls(_native.load_hf_tokenizer(path))
        raise ValueError(f"Tokenizer.from_file: '{path}' is none of tokenizer.json (*.json), "
                         "tokenizer.model (*.model), vocab.json, merges.txt or vocab.txt")

    def encode(self, text, add_special_tokens=True):
        """The token ids of ``text`` (a list of ints); with
        ``add_special_tokens`` the model's template (Llama's BOS, BERT's
        [CLS] ... [SEP])."""
        if not isinstance(text, str):
            raise TypeError(f"encode takes a str, not {type(text).__name__}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            # A lone surrogate ("\ud800") has no UTF-8 form: the extension
            # could not take the string (a pybind11 TypeError).
            raise ValueError(f"encode: text holds {text[e.start]!r} at index {e.start}, a lone "
                             "surrogate that is not Unicode text") from None
        return self._native.encode(text, bool(add_special_tokens))

    def decode(self, ids, skip_special_tokens=True):
        """The text of ``ids`` (bytes that are not UTF-8 become U+FFFD)."""
        if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
            raise TypeError(f"decode takes a list of token ids, not {type(ids).__name__}")
        return self._native.decode([self._id(i, f"ids[{n}]", "decode") for n, i in enumerate(ids)],
                                   bool(skip_special_tokens))

    def _id(self, value, name, where):
        # An id as the extension takes it; past the vocabulary, the
        # extension's own message.
        from ._checks import integer

        value = integer(value, name, where)
        if not 0 <= value < self.vocab_size:
            raise ValueError(f"{where}: id {value} is outside the tokenizer's vocabulary of "
                             f"{self.vocab_size}")
        return value

    def __call__(self, text, add_special_tokens=True):
        return self.encode(text, add_special_tokens)

    @property
    def vocab_size(self):
        """One more than the largest id the tokenizer produces."""
        return self._native.vocab_size

    def token_to_id(self, token):
        """The id of a vocabulary string ("<s>", "[CLS]", "Ġworld"), or None."""
        if not isinstance(token, str):
            raise TypeError(f"token_to_id takes a str, not {type(token).__name__}")
        return self._native.token_to_id(token)

    def id_to_token(self, id):  # noqa: A002 (Hugging Face's name)
        """The vocabulary string of an id ("Ġworld", "##s", "<0x0A>")."""
        return self._native.id_to_token(self._id(id, "id", "id_to_token"))

    def __repr__(self):
        return f"<autoshard.Tokenizer vocabulary {self.vocab_size}>"


def _config_flag(directory, key):
    """A boolean of tokenizer_config.json beside a tokenizer file, or None."""
    from ._checks import read_json

    path = os.path.join(directory, "tokenizer_config.json")
    if not os.path.isfile(path):
        return None
    config = read_json(path, "tokenizer config")
    value = config.get(key) if isinstance(config, dict) else None
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"{path}: \"{key}\" must be true or false, not {value!r}")
    return value


def _add_bos(directory):
    """tokenizer_config.json's add_bos_token beside a tokenizer.model (default true)."""
    value = _config_flag(directory, "add_bos_token")
    return True if value is None else value
