#!/usr/bin/env python3
"""Writes the tokenizer fixtures of tests/tokenizer_test.cc into tests/data/tokenizers/.

  byte_bpe/       tokenizer.json of GPT-2's kind: the byte-level alphabet in
                  GPT-2's id order and a few hand-picked merges
  gpt2_files/     the same vocabulary as vocab.json + merges.txt
  llama3_bpe/     tokenizer.json of Llama 3's kind: its splitting expression,
                  byte-level without GPT-2's expression, ignore_merges, a BOS
                  template and special tokens
  llama3_hub/     tokenizer.json of Llama 3's kind (as llama3_bpe, with all five
                  of Llama 3's special tokens) over a vocabulary every token of
                  which its merges build, so that byte-pair merging without
                  ignore_merges (KerasHub's) gives the same ids: the source of
                  the Llama3Tokenizer preset tests/data/keras_hub/tokenizers/llama3
  qwen2_hub/      the same vocabulary as Qwen2's tokenizer.json has it (NFC,
                  Qwen2's expression: digits one by one, no BOS template,
                  <|endoftext|>, <|im_start|>, <|im_end|>): the source of the
                  QwenTokenizer preset tests/data/keras_hub/tokenizers/qwen2
  wordpiece/      BERT's tokenizer.json with a small hand-written vocabulary,
                  and the same vocabulary as vocab.txt
  sentencepiece/  a byte-fallback BPE model trained by SentencePiece
                  (Debian's python3-sentencepiece) on a multilingual text, as
                  tokenizer.model and converted to tokenizer.json the way
                  Hugging Face converts Llama 2's (legacy.json: Prepend and
                  Replace normalizers; metaspace.json: the Metaspace
                  pre-tokenizer), with expected.json: SentencePiece's own ids
                  of a multilingual sweep of texts.

The expected encodings of the hand-written files are derived in the test's
comments; only the SentencePiece ids come from a library. Deterministic: run
from the repository root, it rewrites identical files.
"""
import json
import os

import sentencepiece as spm

OUT = "tests/data/tokenizers"


def byte_alphabet():
    """GPT-2's byte -> character table, in GPT-2's id order."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(
        range(0xAE, 0xFF + 1))
    order, chars, extra = [], {}, 0
    for b in printable:
        chars[b] = chr(b)
        order.append(b)
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
            order.append(b)
    return [chars[b] for b in order]  # id -> character


# The bytes in GPT-2's id order (byte_alphabet()'s keys).
BYTE_ORDER = [b for b in list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) +
              list(range(0xAE, 0xFF + 1))] + [b for b in range(256) if not (
                  ord("!") <= b <= ord("~") or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF)]


def write(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1, sort_keys=True)
        f.write("\n")


def added(id_, content, special=True):
    return {"id": id_, "content": content, "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": False, "special": special}


def vocab_with_merges(merges, extra=()):
    vocab = {c: i for i, c in enumerate(byte_alphabet())}
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))
    for token in extra:
        vocab.setdefault(token, len(vocab))
    return vocab


# GPT-2 kind. Space is "Ġ" (id 220), newline "Ċ" (id 198), as in GPT-2.
GPT2_MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("Ġ", "w"), ("o", "r"), ("Ġw", "or"),
               ("l", "d"), ("Ġwor", "ld"), ("l", "l"), ("e", "ll"), ("H", "ell"), ("Hell", "o"),
               ("'", "s"), ("Ġ", "Ġ")]


def write_byte_bpe():
    vocab = vocab_with_merges(GPT2_MERGES)
    eot = len(vocab)
    tok = {
        "version": "1.0",
        "added_tokens": [added(eot, "<|endoftext|>")],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "vocab": vocab,
                  "merges": [f"{l} {r}" for l, r in GPT2_MERGES]},
    }
    write(f"{OUT}/byte_bpe/tokenizer.json", tok)
    files = dict(vocab, **{"<|endoftext|>": eot})
    write(f"{OUT}/gpt2_files/vocab.json", files)
    with open(f"{OUT}/gpt2_files/merges.txt", "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for l, r in GPT2_MERGES:
            f.write(f"{l} {r}\n")


LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def write_llama3_bpe():
    merges = [("Ġ", "w"), ("o", "r"), ("Ġw", "or"), ("l", "d"), ("Ġwor", "ld")]
    # Reachable only as whole pieces (ignore_merges): no merges build them.
    whole = ["123", "Ġhello", "'T"]
    vocab = vocab_with_merges(merges, whole)
    bos, eos = len(vocab), len(vocab) + 1
    tok = {
        "version": "1.0",
        "added_tokens": [added(bos, "<|begin_of_text|>"), added(eos, "<|end_of_text|>")],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": False}]},
        "post_processor": {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
             "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                      {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                      {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [bos],
                                                      "tokens": ["<|begin_of_text|>"]}}}]},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": vocab, "merges": [[l, r] for l, r in merges]},
    }
    write(f"{OUT}/llama3_bpe/tokenizer.json", tok)


QWEN2_PATTERN = LLAMA3_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}")

# Pieces that Llama 3's and Qwen2's expressions cut from the hub fixtures'
# text (tests/keras_hub_test.cc), each built by a chain of merges from its
# first byte on, so merging reaches every token of the vocabulary.
HUB_TOKENS = ["Hello", " world", "'s", " end", "123", "45", " apples", "'M", " HERE", " DON",
              "'T", " stop", "!!", "\n\n\n", " spaces", "  ", " and", "tabs", "\r\n", " café",
              " 中文", "的", "202", " ..."]


def hub_merges():
    to_char = dict(zip(BYTE_ORDER, byte_alphabet()))
    merges = []
    for token in HUB_TOKENS:
        chars = [to_char[b] for b in token.encode("utf-8")]
        for i in range(1, len(chars)):
            m = ("".join(chars[:i]), chars[i])
            if m not in merges:
                merges.append(m)
    return merges


def write_hub_bpe(name, pattern, special, template, normalizer, ignore_merges):
    merges = hub_merges()
    vocab = vocab_with_merges(merges)
    ids = {t: len(vocab) + i for i, t in enumerate(special)}
    post = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
            "use_regex": True}
    if template:
        bos = special[0]
        post = {"type": "Sequence", "processors": [post, {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": bos, "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [ids[bos]], "tokens": [bos]}}}]}
    tok = {
        "version": "1.0",
        "added_tokens": [added(ids[t], t) for t in special],
        "normalizer": normalizer,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
             "use_regex": False}]},
        "post_processor": post,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "",
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": ignore_merges,
                  "vocab": vocab, "merges": [f"{l} {r}" for l, r in merges]},
    }
    write(f"{OUT}/{name}/tokenizer.json", tok)


def write_hub_fixtures():
    write_hub_bpe("llama3_hub", LLAMA3_PATTERN,
                  ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                   "<|end_header_id|>", "<|eot_id|>"], True, None, True)
    write_hub_bpe("qwen2_hub", QWEN2_PATTERN, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                  False, {"type": "NFC"}, False)


WORDPIECE_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "hello",
                   "world", "##s", "!", ",", ".", "'", "t", "don", "cafe", "的", "中", "文", "a",
                   "##b", "##c"]


def write_wordpiece():
    vocab = {t: i for i, t in enumerate(WORDPIECE_VOCAB)}
    tok = {
        "version": "1.0",
        "added_tokens": [added(vocab[t], t) for t in WORDPIECE_VOCAB[:5]],
        "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                       "strip_accents": None, "lowercase": True},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}},
                                      {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
                           "pair": [],
                           "special_tokens": {
                               "[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                               "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": vocab},
    }
    write(f"{OUT}/wordpiece/tokenizer.json", tok)
    os.makedirs(f"{OUT}/wordpiece_files", exist_ok=True)
    with open(f"{OUT}/wordpiece_files/vocab.txt", "w", encoding="utf-8") as f:
        f.write("\n".join(WORDPIECE_VOCAB) + "\n")


CORPUS = """\
The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away.
Training a language model on many devices needs a plan for every tensor.
Each device holds only its share of the weights, and the numbers stay the same.
Le renard brun rapide saute par-dessus le chien paresseux. Déjà vu, café, crème brûlée.
Der schnelle braune Fuchs springt über den faulen Hund. Größe, Straße, Übung.
El zorro marrón rápido salta sobre el perro perezoso. ¿Qué tal? ¡Muy bien!
Быстрая коричневая лиса прыгает через ленивую собаку. Привет, мир!
Η γρήγορη καφέ αλεπού πηδά πάνω από τον τεμπέλη σκύλο.
敏捷的棕色狐狸跳过了懒狗。我们在许多设备上训练语言模型。
素早い茶色の狐がのろまな犬を飛び越える。日本語のテキストです。
빠른 갈색 여우가 게으른 개를 뛰어넘는다.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 2024 3.14159 1,000,000.
Emoji are rare here: 🙂 once.
"""

SWEEP = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "  two leading spaces,   runs   of spaces, and a trailing one ",
    "tabs\tand\nnewlines\n\nand\r\nreturns",
    "Café, naïve, résumé, Ünïcödé, crème brûlée",
    "日本語のテキストと中文字符，还有한국어",
    "emoji 🙂🚀 and a family 👩‍👩‍👧 and flags 🇫🇷",
    "Ελληνικά и русский текст",
    "mixed: 12345 + 3.14 = ? (yes!)",
    "العربية עברית हिन्दी",
    "a",
    " ",
    "",
]


def write_sentencepiece():
    d = f"{OUT}/sentencepiece"
    os.makedirs(d, exist_ok=True)
    corpus = "/tmp/autoshard_spm_corpus.txt"
    with open(corpus, "w", encoding="utf-8") as f:
        f.write(CORPUS)
    # Llama 2's settings: BPE, byte fallback, digits split, no normalisation,
    # whitespace kept as it is, a dummy prefix space.
    spm.SentencePieceTrainer.train(
        input=corpus, model_prefix=f"{d}/tokenizer", model_type="bpe", vocab_size=700,
        byte_fallback=True, split_digits=True, normalization_rule_name="identity",
        remove_extra_whitespaces=False, add_dummy_prefix=True, character_coverage=0.98,
        num_threads=1, unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2,
        allow_whitespace_only_pieces=True, max_sentencepiece_length=16)
    os.remove(f"{d}/tokenizer.vocab")
    sp = spm.SentencePieceProcessor(model_file=f"{d}/tokenizer.model")

    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    vocab = {p: i for i, p in enumerate(pieces)}
    # Hugging Face's conversion: every way to cut a normal piece into two
    # pieces is a merge, ranked by the piece's own id (SentencePiece's BPE
    # scores fall with the id), then by the parts' ids.
    merges = []
    for piece, pid in vocab.items():
        if sp.is_control(pid) or sp.is_unknown(pid) or sp.is_byte(pid):
            continue
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            if left in vocab and right in vocab:
                merges.append((pid, vocab[left], vocab[right], left, right))
    merges.sort()
    model = {"type": "BPE", "dropout": None, "unk_token": "<unk>",
             "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": True,
             "byte_fallback": True, "vocab": vocab,
             "merges": [f"{l} {r}" for _, _, _, l, r in merges]}
    decoder = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    template = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                           {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [],
                "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    specials = [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")]
    legacy = {"version": "1.0", "added_tokens": specials,
              "normalizer": {"type": "Sequence", "normalizers": [
                  {"type": "Prepend", "prepend": "▁"},
                  {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
              "pre_tokenizer": None, "post_processor": template, "decoder": decoder,
              "model": model}
    write(f"{d}/legacy.json", legacy)
    metaspace = dict(legacy, normalizer=None,
                     pre_tokenizer={"type": "Metaspace", "replacement": "▁",
                                    "prepend_scheme": "first", "split": False})
    write(f"{d}/metaspace.json", metaspace)

    expected = []
    for text in SWEEP:
        ids = [sp.bos_id()] + sp.encode(text)
        assert sp.decode(ids) == text, text
        expected.append({"text": text, "ids": ids})
    write(f"{d}/expected.json", expected)


if __name__ == "__main__":
    write_byte_bpe()
    write_llama3_bpe()
    write_hub_fixtures()
    write_wordpiece()
    write_sentencepiece()
