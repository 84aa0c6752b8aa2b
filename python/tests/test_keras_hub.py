"""autoshard.from_pretrained on KerasHub presets (tests/data/keras_hub, written
by tools/make_keras_hub_presets.py): the same model as the Hugging Face
directory of the same weights, from one model.weights.h5 and from a sharded
model.weights.json index, on one device and on model=2; the preset's own
tokenizer (KerasHub's tokenizer.json and assets/)."""

import os
import shutil

import numpy as np
import pytest

import autoshard

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data")
HUB = os.path.join(DATA, "keras_hub")
# preset -> the Hugging Face directory holding its weights
PAIRS = {"llama": os.path.join(HUB, "hf_llama"), "gemma": os.path.join(DATA, "hf_gemma"),
         "qwen2": os.path.join(DATA, "hf_qwen2"), "phi3": os.path.join(DATA, "hf_phi3")}


@pytest.mark.parametrize("mesh", [None, "model=2"])
@pytest.mark.parametrize("name", sorted(PAIRS))
def test_a_preset_is_its_hugging_face_directory(name, mesh):
    preset = autoshard.from_pretrained(os.path.join(HUB, name), mesh=mesh)
    hf = autoshard.from_pretrained(PAIRS[name], mesh=mesh)
    ids = [3, 17, 1, 40, 9, 2]
    np.testing.assert_allclose(preset.logits(ids), hf.logits(ids), rtol=1e-5, atol=1e-5)
    assert preset.generate(ids, max_new_tokens=4, temperature=0) == hf.generate(
        ids, max_new_tokens=4, temperature=0)


def test_the_sharded_index_is_read():
    # tests/data/keras_hub/llama keeps its weights in two shards an index lists.
    assert os.path.exists(os.path.join(HUB, "llama", "model.weights.json"))
    assert not os.path.exists(os.path.join(HUB, "llama", "model.weights.h5"))
    model = autoshard.from_pretrained(os.path.join(HUB, "llama"))
    assert model.model_type == "llama"


def test_a_presets_tokenizer_is_keras_hubs(tmp_path):
    # The qwen2 preset with the QwenTokenizer of tests/data/keras_hub/tokenizers
    # (whose ids outrun this small model's vocabulary: only encoding is checked).
    d = tmp_path / "qwen2"
    shutil.copytree(os.path.join(HUB, "qwen2"), d)
    for f in ("tokenizer.json", "preprocessor.json", "assets"):
        src = os.path.join(HUB, "tokenizers", "qwen2", f)
        (shutil.copytree if os.path.isdir(src) else shutil.copy)(src, d / f)
    model = autoshard.from_pretrained(str(d))
    hf = autoshard.Tokenizer.from_file(os.path.join(DATA, "tokenizers", "qwen2_hub"))
    text = "Hello world's end: 12345 I'M HERE"
    assert model.tokenizer.encode(text) == hf.encode(text)
    assert model.tokenizer.decode(model.tokenizer.encode(text)) == text


def test_a_preset_without_weights_is_refused_in_one_line(tmp_path):
    d = tmp_path / "llama"
    shutil.copytree(os.path.join(HUB, "llama"), d)
    os.remove(d / "model.weights.json")
    with pytest.raises(Exception, match="has no weights"):
        autoshard.from_pretrained(str(d))
