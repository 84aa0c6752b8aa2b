"""autoshard.Tokenizer against the committed fixtures in tests/data/tokenizers:
SentencePiece's own ids (expected.json, written by
tools/make_tokenizer_fixtures.py) and the ids tests/tokenizer_test.cc derives
from the hand-written vocabularies and merges."""

import json
import os
import shutil

import pytest

import autoshard

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data",
                    "tokenizers")


def path(*parts):
    return os.path.join(DATA, *parts)


def expected():
    with open(path("sentencepiece", "expected.json"), encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("name", ["tokenizer.model", "legacy.json", "metaspace.json"])
def test_sentencepiece_ids_are_the_librarys(name):
    tok = autoshard.Tokenizer.from_file(path("sentencepiece", name))
    cases = expected()
    assert len(cases) >= 12
    for case in cases:
        text, ids = case["text"], case["ids"]
        # Metaspace adds no marker before a space already there (as in the C++ test).
        if name != "metaspace.json" or not text.startswith(" "):
            assert tok.encode(text) == ids, text
        assert tok.decode(ids) == text


def test_a_directory_reads_as_autoshard_tokenize_does():
    tok = autoshard.Tokenizer.from_file(path("sentencepiece"))  # tokenizer.model there
    case = expected()[0]
    assert tok.encode(case["text"]) == case["ids"]
    assert tok.vocab_size > max(case["ids"])


# GPT-2's kind: ids 0-255 the byte alphabet ('!' = 0, so printable ASCII c is
# c - 33; "Ġ" 220, "Ċ" 198); merges from 256 (Hello 267, Ġworld 263, 's 268,
# ĠĠ 269), <|endoftext|> 270.
@pytest.mark.parametrize("where", [("byte_bpe", "tokenizer.json"), ("gpt2_files", "vocab.json"),
                                   ("gpt2_files", "merges.txt"), ("gpt2_files",)])
def test_gpt2_byte_level_bpe(where):
    tok = autoshard.Tokenizer.from_file(path(*where))
    assert tok.encode("Hello world") == [267, 263]
    assert tok.encode("the world's end", add_special_tokens=False) == [
        ord("t") - 33, 257, 263, 268, 220, ord("e") - 33, ord("n") - 33, ord("d") - 33]
    assert tok.encode("x\n\n  ") == [ord("x") - 33, 198, 198, 269]
    assert tok.encode("é") == [127, 102]
    assert tok.encode("Hello<|endoftext|> world") == [267, 270, 263]
    assert tok.decode([267, 270, 263]) == "Hello world"
    assert tok.decode([267, 270, 263], skip_special_tokens=False) == "Hello<|endoftext|> world"
    assert tok.vocab_size == 271
    assert tok.token_to_id("Ġworld") == 263 and tok.token_to_id("nope") is None
    assert tok.id_to_token(269) == "ĠĠ"
    assert tok("Hello") == [267]


def test_llama3_byte_level_bpe_with_bos():
    tok = autoshard.Tokenizer.from_file(path("llama3_bpe", "tokenizer.json"))
    assert tok.encode("DON'T say hello world 12345") == [
        264, ord("D") - 33, ord("O") - 33, ord("N") - 33, 263, 220, ord("s") - 33,
        ord("a") - 33, ord("y") - 33, 262, 260, 220, 261, ord("4") - 33, ord("5") - 33]
    assert tok.decode([264, 262, 260, 265]) == " hello world"
    assert tok.decode([264, 262, 260, 265], False) == "<|begin_of_text|> hello world<|end_of_text|>"


# BERT's kind: [PAD] 0 [UNK] 1 [CLS] 2 [SEP] 3 [MASK] 4 un 5 ##aff 6 ##able 7
# hello 8 world 9 ##s 10 ! 11 , 12 . 13 ' 14 t 15 don 16 cafe 17 的 18 中 19
# 文 20 a 21 ##b 22 ##c 23.
@pytest.mark.parametrize("where", [("wordpiece", "tokenizer.json"),
                                   ("wordpiece_files", "vocab.txt"), ("wordpiece_files",)])
def test_bert_wordpiece(where):
    tok = autoshard.Tokenizer.from_file(path(*where))
    assert tok.encode("Unaffable Worlds!") == [2, 5, 6, 7, 9, 10, 11, 3]
    assert tok.encode("Héllo, CAFÉ don't 中文的") == [2, 8, 12, 17, 16, 14, 15, 19, 20, 18, 3]
    assert tok.encode("abc abd xyz") == [2, 21, 22, 23, 1, 1, 3]
    assert tok.encode("[CLS] hello [MASK]", add_special_tokens=False) == [2, 8, 4]
    assert tok.decode([2, 5, 6, 7, 9, 10, 11, 3]) == "unaffable worlds!"
    assert tok.vocab_size == 24


def test_vocab_txt_keeps_case_when_its_config_says_so(tmp_path):
    shutil.copy(path("wordpiece_files", "vocab.txt"), tmp_path)
    (tmp_path / "tokenizer_config.json").write_text('{"do_lower_case": false}')
    tok = autoshard.Tokenizer.from_file(tmp_path / "vocab.txt")
    assert tok.encode("Hello hello") == [2, 1, 8, 3]  # "Hello" is not in the vocabulary


def test_a_model_directory_tokenizer_is_the_same(tmp_path):
    shutil.copy(path("byte_bpe", "tokenizer.json"), tmp_path)
    assert autoshard.Tokenizer.from_file(tmp_path).encode("Hello world") == [267, 263]


def test_bad_files_raise(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        autoshard.Tokenizer.from_file(tmp_path / "nothing.json")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ValueError, match="none of tokenizer.json"):
        autoshard.Tokenizer.from_file(tmp_path / "notes.txt")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ValueError, match="broken.json"):
        autoshard.Tokenizer.from_file(tmp_path / "broken.json")
    with pytest.raises(ValueError, match="has no tokenizer"):
        autoshard.Tokenizer.from_file(tmp_path)
    shutil.copy(path("gpt2_files", "vocab.json"), tmp_path)
    with pytest.raises(FileNotFoundError, match="merges.txt"):
        autoshard.Tokenizer.from_file(tmp_path / "vocab.json")
    tok = autoshard.Tokenizer.from_file(path("byte_bpe", "tokenizer.json"))
    with pytest.raises(ValueError, match="outside the tokenizer's vocabulary"):
        tok.decode([5, 271])
    with pytest.raises(TypeError):
        tok.encode(b"bytes")
