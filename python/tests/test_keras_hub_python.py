"""autoshard.keras_hub: KerasHub's classes on the fixture presets
(tests/data/keras_hub, small random weights written from the Hugging Face
fixtures by tools/make_keras_hub_presets.py). Each is checked against a
path that does not go through it: the Hugging Face directory of the same
weights (its own safetensors reader), the command line's greedy ids,
PyTorch's logits for the BERT classifier (bert_reference.safetensors), one
device for the sharded runs, and NumPy for the loss."""

import json
import os
import re
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

import autoshard
import autoshard.keras_hub as keras_hub

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data")
HUB = os.path.join(DATA, "keras_hub")
# preset -> (KerasHub class, the Hugging Face directory of its weights)
DECODERS = {"gpt2": ("GPT2CausalLM", os.path.join(DATA, "hf_gpt2")),
            "llama": ("LlamaCausalLM", os.path.join(HUB, "hf_llama")),
            "gemma": ("GemmaCausalLM", os.path.join(DATA, "hf_gemma")),
            "gemma2": ("GemmaCausalLM", os.path.join(HUB, "hf_gemma2")),
            "opt": ("OPTCausalLM", os.path.join(DATA, "hf_opt")),
            "qwen2": ("QwenCausalLM", os.path.join(DATA, "hf_qwen2")),
            "mistral": ("MistralCausalLM", os.path.join(DATA, "hf_mistral")),
            "phi3": ("Phi3CausalLM", os.path.join(DATA, "hf_phi3"))}
MESHES = [None, "model=2", "data=2,model=2"]


def preset(name):
    return os.path.join(HUB, name)


def causal_lm(name, **kwargs):
    return getattr(keras_hub.models, DECODERS[name][0]).from_preset(preset(name), **kwargs)


def tokens(vocab, shape, seed=0):
    return np.random.default_rng(seed).integers(0, vocab, shape).astype(np.int32)


def cli_greedy_ids(weights, prompt, new, mesh):
    path = os.environ.get("AUTOSHARD_CLI")
    if not path or not os.path.exists(path):
        pytest.skip("the autoshard binary is not built (AUTOSHARD_CLI)")
    args = [path, "generate", "--json", "--weights", weights, "--prompt-ids",
            ",".join(map(str, prompt)), "--max-new-tokens", str(new), "--temperature", "0"]
    out = subprocess.run(args + (["--mesh", mesh] if mesh else []), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])["output_ids"]


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    kinds = {"F32": np.float32, "I32": np.int32, "I64": np.int64}
    out = {}
    for name, t in header.items():
        if name != "__metadata__":
            lo, hi = t["data_offsets"]
            out[name] = np.frombuffer(data[lo:hi], kinds[t["dtype"]]).reshape(t["shape"])
    return out


# Loading: the classes, the same model as the Hugging Face directory


def test_the_classes_are_the_registrys_families():
    for name in ("GPT2Backbone", "GPT2CausalLM", "LlamaCausalLM", "Llama3CausalLM",
                 "GemmaCausalLM", "OPTCausalLM", "MistralCausalLM", "QwenCausalLM",
                 "BertBackbone", "BertTextClassifier", "RobertaTextClassifier"):
        assert hasattr(keras_hub.models, name), name
    assert issubclass(keras_hub.models.GemmaCausalLM, keras_hub.models.CausalLM)
    assert issubclass(keras_hub.models.BertTextClassifier, keras_hub.models.TextClassifier)


@pytest.mark.parametrize("mesh", MESHES + ["data=2"])
@pytest.mark.parametrize("name", sorted(DECODERS))
def test_a_causal_lm_is_its_hugging_face_directory(name, mesh):
    lm = causal_lm(name, mesh=mesh)
    hf = autoshard.from_pretrained(DECODERS[name][1])  # one device, safetensors
    ids = tokens(lm.vocab_size, (2, 6), seed=1)
    got = lm({"token_ids": ids, "padding_mask": np.ones_like(ids)})
    np.testing.assert_allclose(got, hf.logits(ids), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(lm.predict({"token_ids": ids}), got)
    if mesh:
        assert all(f"{a}" in lm.mesh for a in mesh.split(","))


@pytest.mark.parametrize("mesh", MESHES)
@pytest.mark.parametrize("name", ["gpt2", "llama", "gemma2"])
def test_greedy_generation_is_the_command_lines(name, mesh):
    lm = causal_lm(name, mesh=mesh)
    lm.compile(sampler="greedy")
    # Two prompts of different lengths, right-padded to max_length 9.
    x = {"token_ids": np.array([[5, 9, 3, 0, 0, 0, 0, 0, 0], [7, 2, 11, 4, 0, 0, 0, 0, 0]]),
         "padding_mask": np.array([[1, 1, 1, 0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0, 0, 0, 0]])}
    out = lm.generate(x, stop_token_ids=None)
    for row, prompt in enumerate(([5, 9, 3], [7, 2, 11, 4])):
        want = cli_greedy_ids(preset(name), prompt, 9 - len(prompt), mesh)
        assert list(out["token_ids"][row]) == prompt + want
    assert out["padding_mask"].all()


def test_generation_stops_at_a_stop_token_as_keras_hub_marks_it():
    lm = causal_lm("gpt2")
    lm.compile(sampler="greedy")
    x = {"token_ids": np.array([[5, 9, 3, 0, 0, 0, 0, 0]]),
         "padding_mask": np.array([[1, 1, 1, 0, 0, 0, 0, 0]])}
    free = lm.generate(x, stop_token_ids=None)["token_ids"][0]
    # The first new token after the first that did not come before it.
    at = next(i for i in range(4, 8) if free[i] not in free[3:i])
    out = lm.generate(x, stop_token_ids=(int(free[at]),))
    assert list(out["token_ids"][0][:at + 1]) == list(free[:at + 1])
    # causal_lm.py: the mask keeps the stop token and drops what follows.
    assert list(out["padding_mask"][0]) == [True] * (at + 1) + [False] * (7 - at)
    assert (out["token_ids"][0][at + 1:] == 0).all()  # the input's padding, untouched


def test_samplers_are_keras_hubs_names_and_objects():
    lm = causal_lm("gpt2", seed=3)
    x = {"token_ids": np.array([[5, 9, 3, 0, 0, 0, 0, 0]]),
         "padding_mask": np.array([[1, 1, 1, 0, 0, 0, 0, 0]])}
    lm.compile(sampler="top_k")
    a = lm.generate(x, stop_token_ids=None)["token_ids"]
    lm.compile(sampler=keras_hub.samplers.TopKSampler(k=5))
    np.testing.assert_array_equal(lm.generate(x, stop_token_ids=None)["token_ids"], a)
    ref = autoshard.from_pretrained(preset("gpt2"), seed=3)
    assert list(a[0][3:]) == ref.generate([5, 9, 3], max_new_tokens=5, top_k=5, temperature=1)
    lm.compile(sampler=keras_hub.samplers.TopPSampler(p=0.5))
    assert lm.generate(x, stop_token_ids=None)["token_ids"].shape == (1, 8)
    with pytest.raises(ValueError, match="sampler must be one of"):
        lm.compile(sampler="beam")


# Training


def lm_batch(vocab, n=8, t=9, seed=0):
    ids = tokens(vocab, (n, t), seed)
    return {"token_ids": ids[:, :-1], "padding_mask": np.ones((n, t - 1), np.int32)}, ids[:, 1:]


def test_evaluate_is_numpys_cross_entropy():
    lm = causal_lm("llama")
    x, y = lm_batch(lm.vocab_size)
    logits = lm(x).astype(np.float64)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    per_token = -np.log(np.take_along_axis(p, y[..., None], -1)[..., 0])
    loss, accuracy = lm.evaluate(x, y)
    assert loss == pytest.approx(per_token.mean(), rel=1e-6)
    assert accuracy == pytest.approx((logits.argmax(-1) == y).mean())
    # sample_weight: summed over every position, divided by their number
    # (keras/src/losses/loss.py reduce_values, "sum_over_batch_size").
    w = np.ones(y.shape)
    w[:, 5:] = 0
    got = lm.evaluate(x, y, sample_weight=w, return_dict=True)["loss"]
    assert got == pytest.approx((per_token * w).sum() / y.size, rel=1e-6)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_fit_lowers_the_loss_and_sharded_equals_one_device(name):
    runs = {}
    for mesh in MESHES:
        lm = causal_lm(name, mesh=mesh)
        lm.compile(optimizer=autoshard.keras.optimizers.Adam(1e-2))
        x, y = lm_batch(lm.vocab_size)
        before = lm.evaluate(x, y)[0]
        history = lm.fit(x, y, batch_size=4, epochs=3)
        after = lm.evaluate(x, y)[0]
        assert after < before - 0.5
        runs[mesh] = (history.steps, lm(x))
    for mesh in MESHES[1:]:
        np.testing.assert_allclose(runs[mesh][0], runs[None][0], rtol=1e-4)
        np.testing.assert_allclose(runs[mesh][1], runs[None][1], rtol=1e-3, atol=1e-4)


def test_fit_then_generate_and_save_to_preset_round_trip(tmp_path):
    lm = causal_lm("gpt2")
    x, y = lm_batch(lm.vocab_size)
    lm.compile(optimizer="adam", sampler="greedy")
    lm.fit(x, y, batch_size=8, epochs=2)
    trained = lm(x)
    lm.save_to_preset(tmp_path / "trained")
    again = keras_hub.models.GPT2CausalLM.from_preset(tmp_path / "trained")
    np.testing.assert_allclose(again(x), trained, rtol=1e-6, atol=1e-6)
    prompt = {"token_ids": np.array([[5, 9, 3, 0, 0, 0]]),
              "padding_mask": np.array([[1, 1, 1, 0, 0, 0]])}
    again.compile(sampler="greedy")
    np.testing.assert_array_equal(again.generate(prompt, stop_token_ids=None)["token_ids"],
                                  lm.generate(prompt, stop_token_ids=None)["token_ids"])
    config = json.load(open(tmp_path / "trained" / "config.json"))
    assert config["class_name"] == "GPT2Backbone"


def test_save_to_preset_never_touches_the_users_files(tmp_path):
    lm = causal_lm("opt")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not empty"):
        lm.save_to_preset(busy)
    assert os.listdir(busy) == ["notes.txt"] and (busy / "notes.txt").read_text() == "mine"
    (tmp_path / "a_file").write_text("mine")
    with pytest.raises(FileExistsError, match="is a file"):
        lm.backbone.save_to_preset(tmp_path / "a_file")
    assert (tmp_path / "a_file").read_text() == "mine"
    (tmp_path / "empty").mkdir()
    lm.backbone.save_to_preset(tmp_path / "empty")  # an empty directory is fine
    assert (tmp_path / "empty" / "model.weights.h5").exists()


def test_save_to_preset_in_shards_as_keras_writes_them(tmp_path):
    lm = causal_lm("llama")
    x, _ = lm_batch(lm.vocab_size)
    small = 1.5e-5  # GB (about 16 KB): several shards
    assert lm.count_params() * 4 > 3 * small * 2**30
    lm.save_to_preset(tmp_path / "sharded", max_shard_size=small)
    files = sorted(os.listdir(tmp_path / "sharded"))
    shards = [f for f in files if re.fullmatch(r"model_\d{5}\.weights\.h5", f)]
    assert len(shards) > 2 and shards[0] == "model_00000.weights.h5"
    assert "model.weights.h5" not in files and "model.weights.json" in files
    # Keras's ShardedH5IOStore index: {"metadata": {"total_size"}, "weight_map":
    # {"/<layer>/vars": shard}}; a layer that fits in a shard lies whole in
    # the shard named, a larger one (the untied embedding's two tables)
    # starts there and goes on in the next, as Keras splits it.
    index = json.load(open(tmp_path / "sharded" / "model.weights.json"))
    assert set(index["weight_map"].values()) == set(shards)
    seen, where = {}, {}
    for shard in shards:
        held = autoshard._native.read_weights_h5(str(tmp_path / "sharded" / shard))
        for name, value in held:
            assert name not in seen
            seen[name] = value
            where.setdefault("/" + name.rsplit("/", 1)[0], []).append((shard, value.size * 4))
        assert sum(v.size * 4 for _, v in held) <= small * 2**30  # Keras's accounting
    assert set(where) == set(index["weight_map"])
    for group, parts in where.items():
        assert parts[0][0] == index["weight_map"][group]
        assert len({s for s, _ in parts}) == 1 or sum(n for _, n in parts) > small * 2**30
    assert index["metadata"]["total_size"] == sum(v.size * 4 for v in seen.values())
    lm.save_to_preset(tmp_path / "whole")  # the default, 10 GB: one file
    assert not (tmp_path / "whole" / "model.weights.json").exists()
    whole = dict(autoshard._native.read_weights_h5(str(tmp_path / "whole" / "model.weights.h5")))
    assert set(whole) == set(seen)
    for name, value in whole.items():
        np.testing.assert_array_equal(seen[name], value)
    again = keras_hub.models.LlamaCausalLM.from_preset(tmp_path / "sharded", mesh="model=2")
    np.testing.assert_allclose(again(x), lm(x), rtol=1e-5, atol=1e-6)
    clf = keras_hub.models.BertTextClassifier.from_preset(preset("bert"))
    xc, _ = classification_task(vocab=clf.vocab_size)
    clf.save_to_preset(tmp_path / "bert", max_shard_size=small)
    assert (tmp_path / "bert" / "model.weights.json").exists()
    assert (tmp_path / "bert" / "task.weights.h5").exists()  # the head: one file, as KerasHub
    np.testing.assert_allclose(keras_hub.models.BertTextClassifier.from_preset(
        tmp_path / "bert")(xc), clf(xc), rtol=1e-5, atol=1e-6)
    with pytest.raises(Exception, match="more than max_shard_size"):
        lm.save_to_preset(tmp_path / "tiny", max_shard_size=1e-9)
    assert not (tmp_path / "tiny").exists()
    with pytest.raises(ValueError, match="max_shard_size"):
        lm.save_to_preset(tmp_path / "neg", max_shard_size=-1)


# BERT's classifier


@pytest.mark.parametrize("mesh", MESHES)
def test_bert_text_classifier_gives_pytorchs_logits(mesh):
    ref = read_safetensors(os.path.join(DATA, "bert_reference.safetensors"))
    model = keras_hub.models.BertTextClassifier.from_preset(preset("bert"), num_classes=3,
                                                            mesh=mesh)
    got = model({"token_ids": ref["token_ids"], "segment_ids": ref["segment_ids"],
                 "padding_mask": ref["padding_mask"]})
    np.testing.assert_allclose(got, ref["logits"], rtol=1e-4, atol=1e-5)


def classification_task(n=16, t=6, vocab=97):
    """Label: whether token 1 appears in the first half (a task BERT can learn)."""
    ids = tokens(vocab - 2, (n, t), seed=5) + 2
    y = (np.arange(n) % 2).astype(np.int32)
    ids[y == 1, 1] = 1
    return {"token_ids": ids, "segment_ids": np.zeros_like(ids),
            "padding_mask": np.ones_like(ids)}, y


def test_from_pretrained_reads_an_encoder_preset_too():
    model = autoshard.from_pretrained(preset("roberta"))
    x, _ = classification_task(vocab=model.vocab_size)
    assert isinstance(model, autoshard.EncoderModel)
    np.testing.assert_array_equal(
        model(x["token_ids"]),
        keras_hub.models.RobertaTextClassifier.from_preset(preset("roberta"))(x))


def test_a_text_classifier_learns_and_sharded_equals_one_device():
    x, y = classification_task()
    runs = {}
    for mesh in MESHES:
        model = keras_hub.models.BertTextClassifier.from_preset(preset("bert"), mesh=mesh)
        model.compile(optimizer=autoshard.keras.optimizers.Adam(3e-3))
        before = model.evaluate(x, y)[0]
        history = model.fit(x, y, batch_size=8, epochs=8)
        loss, accuracy = model.evaluate(x, y)
        assert loss < before / 2 and accuracy == 1.0
        runs[mesh] = history.steps
    for mesh in MESHES[1:]:
        np.testing.assert_allclose(runs[mesh], runs[None], rtol=1e-3)


def test_a_classifier_saves_to_a_preset_and_loads_back(tmp_path):
    model = keras_hub.models.RobertaTextClassifier.from_preset(preset("roberta"))
    x, y = classification_task(vocab=model.vocab_size)
    model.compile(optimizer=autoshard.keras.optimizers.Adam(1e-3))
    model.fit(x, y, batch_size=16, epochs=1)
    model.save_to_preset(tmp_path / "out")
    assert (tmp_path / "out" / "task.weights.h5").exists()
    again = keras_hub.models.TextClassifier.from_preset(tmp_path / "out")
    assert type(again).__name__ == "TextClassifier"
    np.testing.assert_allclose(again(x), model(x), rtol=1e-5, atol=1e-6)


def test_num_classes_other_than_the_presets_gives_a_fresh_head(tmp_path):
    preset_model = keras_hub.models.BertTextClassifier.from_preset(preset("bert"))
    x, y = classification_task(vocab=preset_model.vocab_size)
    model = keras_hub.models.BertTextClassifier.from_preset(preset("bert"), num_classes=5)
    assert model.num_classes == 5 and model(x).shape == (len(y), 5)
    native, old = model._native, preset_model._native
    head = [p for p in native.weight_paths() if p.startswith("classifier.")]
    assert head and set(native.weight_paths()) == set(old.weight_paths())
    for p in native.weight_paths():
        if p not in head:  # the backbone (and BERT's pooler): the preset's
            np.testing.assert_array_equal(native.weight(p), old.weight(p))
    # The preset's head in the first classes of the fresh one gives the
    # preset's logits there: the backbone is the preset's.
    for p in head:
        w, w_old = native.weight(p), old.weight(p)
        axis = [i for i, (a, b) in enumerate(zip(w.shape, w_old.shape)) if a != b][0]
        index = [slice(None)] * w.ndim
        index[axis] = slice(0, w_old.shape[axis])
        w[tuple(index)] = w_old
        native.set_weight(p, w)
    np.testing.assert_allclose(model(x)[:, :old.num_labels], preset_model(x), rtol=1e-5,
                               atol=1e-6)
    # It trains, sharded as on one device, and saves as a preset of 5 classes.
    runs = []
    for mesh in (None, "model=2"):
        m = keras_hub.models.BertTextClassifier.from_preset(preset("bert"), num_classes=5,
                                                            mesh=mesh)
        m.compile(optimizer=autoshard.keras.optimizers.Adam(1e-2))
        history = m.fit(x, y, batch_size=8, epochs=8)
        runs.append(history.steps)
    np.testing.assert_allclose(runs[1], runs[0], rtol=1e-3)
    assert history.history["loss"][-1] < history.history["loss"][0] / 2
    assert m.evaluate(x, y)[1] == 1.0
    m.save_to_preset(tmp_path / "five")
    again = keras_hub.models.TextClassifier.from_preset(tmp_path / "five")
    assert again.num_classes == 5
    np.testing.assert_allclose(again(x), m(x), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="num_classes"):
        keras_hub.models.BertTextClassifier.from_preset(preset("bert"), num_classes=0)


def test_the_generic_classes_take_any_family():
    assert type(keras_hub.models.CausalLM.from_preset(preset("qwen2"))).__name__ == "CausalLM"
    backbone = keras_hub.models.Backbone.from_preset(preset("bert"))
    assert backbone.class_name == "BertBackbone" and backbone.count_params() > 0
    bb = keras_hub.models.BertBackbone.from_preset(preset("bert"))
    assert isinstance(bb, keras_hub.models.BertBackbone)


# Text through the preset's tokenizer


def test_text_in_text_out_through_the_presets_tokenizer(tmp_path):
    # The gpt2 preset with a GPT2Tokenizer of its 67 ids: bytes as tokens,
    # no merges, <|endoftext|> last.
    d = tmp_path / "gpt2"
    shutil.copytree(preset("gpt2"), d)
    chars = [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["Ġ"]
    chars += [chr(c) for c in range(ord("A"), ord("A") + 66 - len(chars))]
    vocab = {c: i for i, c in enumerate(chars)}
    vocab["<|endoftext|>"] = 66
    (d / "assets" / "tokenizer").mkdir(parents=True)
    (d / "assets" / "tokenizer" / "vocabulary.json").write_text(json.dumps(vocab))
    (d / "assets" / "tokenizer" / "merges.txt").write_text("#version: 0.2\n")
    shutil.copy(os.path.join(HUB, "tokenizers", "gpt2", "tokenizer.json"), d)
    lm = keras_hub.models.GPT2CausalLM.from_preset(d)
    lm.compile(sampler="greedy")
    out = lm.generate("the cat", max_length=12)
    assert out.startswith("the cat")
    ids = lm.tokenizer.encode("the cat")
    ref = autoshard.from_pretrained(preset("gpt2"))
    new = ref.generate(ids, max_new_tokens=12 - len(ids), temperature=0, ignore_eos=True)
    stop = new.index(66) + 1 if 66 in new else len(new)
    assert out == lm.tokenizer.decode(ids + new[:stop])
    assert lm.generate(["the cat", "a"], max_length=12, strip_prompt=True)[0] == \
        lm.tokenizer.decode(new[:stop])


# Bad input


def test_bad_presets_and_classes_are_one_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="downloads nothing"):
        keras_hub.models.BertBackbone.from_preset("bert_tiny_en_uncased")
    with pytest.raises(FileNotFoundError, match="not a preset directory"):
        keras_hub.models.GemmaCausalLM.from_preset("kaggle://keras/gemma/keras/gemma_2b_en")
    with pytest.raises(ValueError, match="Hugging Face directory.*from_pretrained"):
        keras_hub.models.GPT2CausalLM.from_preset(os.path.join(DATA, "hf_gpt2"))
    with pytest.raises(ValueError, match="no config.json"):
        keras_hub.models.GPT2CausalLM.from_preset(tmp_path)
    with pytest.raises(ValueError, match="holds a GPT2Backbone, not a BertBackbone"):
        keras_hub.models.BertBackbone.from_preset(preset("gpt2"))
    with pytest.raises(ValueError, match="is an encoder.*BertTextClassifier"):
        keras_hub.models.CausalLM.from_preset(preset("bert"))
    with pytest.raises(AttributeError, match="T5Backbone.*GPT2Backbone.*BertBackbone"):
        keras_hub.models.T5Backbone  # noqa: B018
    d = tmp_path / "t5"
    shutil.copytree(preset("gpt2"), d)
    config = json.load(open(d / "config.json"))
    config["class_name"] = "T5Backbone"
    (d / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="T5Backbone, which autoshard has no architecture for "
                                         r"\(it has GPT2Backbone.*RobertaBackbone\)"):
        keras_hub.models.Backbone.from_preset(d)
    with pytest.raises(ValueError, match="unsupported argument.*colour"):
        keras_hub.models.GPT2CausalLM.from_preset(preset("gpt2"), colour=1)
    with pytest.raises(ValueError, match='sharding must be None, "auto"'):
        keras_hub.models.GPT2CausalLM.from_preset(preset("gpt2"), sharding="magic")


def test_bad_calls_are_one_clear_error():
    lm = causal_lm("gpt2")
    x, y = lm_batch(lm.vocab_size)
    with pytest.raises(ValueError, match='stop_token_ids="auto".*no tokenizer'):
        lm.generate({"token_ids": np.array([[1, 2, 0]]), "padding_mask": np.array([[1, 1, 0]])})
    with pytest.raises(ValueError, match="no tokenizer.*token ids"):
        lm.generate("hello", stop_token_ids=None)
    with pytest.raises(ValueError, match="prefix"):
        lm.generate({"token_ids": np.array([[1, 2, 3]]), "padding_mask": np.array([[0, 1, 1]])},
                    stop_token_ids=None)
    with pytest.raises(ValueError, match="give y"):
        lm.fit(x)
    gapped = dict(x, padding_mask=np.concatenate([np.zeros((8, 1), np.int32),
                                                 x["padding_mask"][:, 1:]], 1))
    with pytest.raises(ValueError, match="pad each sequence on the right"):
        lm.fit(gapped, y)
    with pytest.raises(ValueError, match="unknown input.*segment_ids"):
        lm(dict(x, segment_ids=x["token_ids"]))
    with pytest.raises(ValueError, match="loss"):
        lm.compile(loss="mse")
    with pytest.raises(Exception, match="outside the model's vocabulary"):
        lm({"token_ids": np.array([[1, 500]])})
    classifier = keras_hub.models.BertTextClassifier.from_preset(preset("bert"))
    cx, cy = classification_task(n=4)
    classifier.compile()
    with pytest.raises(Exception, match="not a class id"):
        classifier.fit(cx, cy + 3)
    with pytest.raises(NotImplementedError, match="hidden states are not exposed"):
        lm.backbone({"token_ids": x["token_ids"]})


# sharding="auto", the plan, and a Keras LayoutMap (keras-hub#2806)


def test_sharding_auto_plans_on_the_devices_and_equals_one_device():
    one = causal_lm("llama")
    x, y = lm_batch(one.vocab_size)
    auto = causal_lm("llama", sharding="auto")  # AutoShard picks the mesh's shape
    np.testing.assert_allclose(auto(x), one(x), rtol=1e-5, atol=1e-5)
    mesh = autoshard.keras.distribution.DeviceMesh((1, 2), ("data", "model"))
    on_mesh = causal_lm("llama", sharding=mesh)
    assert on_mesh.plan.mesh == "data=1,model=2" and on_mesh.plan.distribution == "AutoShard"
    np.testing.assert_allclose(on_mesh(x), one(x), rtol=1e-5, atol=1e-5)


def test_the_plan_lists_every_keras_variable_with_its_layout():
    lm = causal_lm("llama", mesh="model=2")
    x, y = lm_batch(lm.vocab_size)
    lm.compile(optimizer="adam")
    lm.fit(x, y, batch_size=8)  # the training step is what AutoShard planned
    plan = lm.plan
    names = set(plan.variables)
    assert names == {p for p, _, _ in autoshard._native.keras_hub_variables(preset("llama"))}
    query = plan.variables["transformer_layer_0/self_attention/query/kernel"]
    assert query["shape"] == [24, 6, 4] and query["weight"] == "layers.0.self_attn.q_proj.kernel"
    assert len(plan.layout_map[query["path"]]) == 3
    split = [p for p in names if p not in plan.replicated]
    assert split and all(any(a is not None for a in plan.layout_map[p]) for p in split)
    text = repr(plan)
    assert text.startswith(f"AutoShard on model=2: {len(split)} of {len(names)} variables split")
    assert "transformer_layer_1/feedforward_output_dense/kernel" in text
    assert any(r.startswith("predicted") for r in plan.explanation) and plan.predicted_step_s > 0
    assert keras_hub.models.GPT2CausalLM.from_preset(preset("gpt2")).plan.distribution == \
        "one device"


def model_parallel(entries):
    dist = autoshard.keras.distribution
    mesh = dist.DeviceMesh((1, 2), ("data", "model"))
    layout_map = dist.LayoutMap(mesh)
    for key, layout in entries.items():
        layout_map[key] = layout
    return dist.ModelParallel(layout_map=layout_map, batch_dim_name="data")


def test_a_keras_layout_map_lays_out_the_preset_as_keras_would():
    # KerasHub's own style of keys (regular expressions over variable.path).
    mp = model_parallel({"token_embedding/embeddings": ("model", None),
                         r"self_attention/(query|key|value)/kernel": (None, "model", None),
                         r"attention_output/kernel": ("model", None, None),
                         r"feedforward_(gate|intermediate)_dense/kernel": (None, "model"),
                         r"feedforward_output_dense/kernel": ("model", None)})
    lm = causal_lm("llama", distribution=mp)
    plan = lm.plan
    assert plan.distribution == "ModelParallel"
    assert plan.layout_map["transformer_layer_1/self_attention/key/kernel"] == \
        (None, "model", None)
    assert plan.layout_map["token_embedding/embeddings"] == ("model", None)
    assert "sequence_output_layernorm/scale" in plan.replicated
    one = causal_lm("llama")
    x, y = lm_batch(one.vocab_size)
    np.testing.assert_allclose(lm(x), one(x), rtol=1e-5, atol=1e-5)
    for m in (lm, one):
        m.compile(optimizer=autoshard.keras.optimizers.Adam(1e-2))
    np.testing.assert_allclose(lm.fit(x, y, batch_size=4).steps, one.fit(x, y, batch_size=4).steps,
                               rtol=1e-4)
    # The same map set globally (keras.distribution.set_distribution).
    with mp.scope():
        assert causal_lm("llama").plan.distribution == "ModelParallel"


def test_a_layout_map_key_that_matches_nothing_is_an_error():
    # Keras 3.0-era paths ("_query_dense") or a typo would leave the weights
    # they name replicated without a word; here it is an error naming the key.
    mp = model_parallel({r"self_attention/query/kernel": (None, "model", None),
                         r"decoder_block_\d+/attention/query/kernel": (None, "model", None)})
    with pytest.raises(ValueError, match=r"'decoder_block_\\\\d\+/attention/query/kernel' match "
                                         "no variable of this preset"):
        causal_lm("llama", distribution=mp)
    two = model_parallel({"query/kernel": (None, "model", None),
                          "self_attention/query": (None, "model", None)})
    with pytest.raises(ValueError, match="matches several keys"):
        causal_lm("llama", distribution=two)
    with pytest.raises(ValueError, match="names 2 dimensions; the variable has 3"):
        causal_lm("llama", distribution=model_parallel({"query/kernel": (None, "model")}))
    with pytest.raises(ValueError, match="not both"):
        causal_lm("llama", distribution=mp, mesh="model=2")


# autoshard.TensorParallel over KerasHub models (several inputs)


def test_the_keras_tensor_parallel_quick_start_runs_and_equals_one_device():
    # TensorParallelKeras(BertBackbone.from_preset(...)), compile, fit on the dict.
    x, y = classification_task()
    x = {"token_ids": x["token_ids"], "segment_ids": x["segment_ids"]}  # no padding_mask
    tp = autoshard.TensorParallel(keras_hub.models.BertBackbone.from_preset(preset("bert")),
                                  world_size=2)
    tp.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    history = tp.fit(x, y, batch_size=8, epochs=4)
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert tp.plan.mesh and np.prod(tp.device_mesh.shape) == 2 and "BertBackbone" in repr(tp)
    one = keras_hub.models.BertTextClassifier.from_preset(preset("bert"))
    one.compile(optimizer="adam")
    np.testing.assert_allclose(history.steps, one.fit(x, y, batch_size=8, epochs=4).steps,
                               rtol=1e-3)
    np.testing.assert_allclose(tp.predict(x), one.predict(x), rtol=1e-3, atol=1e-4)
    assert tp.evaluate(x, y)[1] == one.evaluate(x, y)[1]


def test_tensor_parallel_keeps_a_causal_lms_trained_weights():
    lm = causal_lm("gpt2")
    x, y = lm_batch(lm.vocab_size)
    lm.compile(optimizer=autoshard.keras.optimizers.Adam(1e-2))
    lm.fit(x, y, batch_size=8)
    before = lm(x)
    tp = autoshard.TensorParallel(lm, world_size=2)
    tp.compile(optimizer=autoshard.keras.optimizers.Adam(1e-2))
    np.testing.assert_allclose(tp.predict(x), before, rtol=1e-5, atol=1e-5)
    loss = lm.evaluate(x, y)[0]
    assert tp.fit(x, y, batch_size=8).steps[0] == pytest.approx(loss, rel=1e-5)
    with pytest.raises(ValueError, match="sparse categorical cross-entropy"):
        tp.compile(optimizer="adam", loss="mse")
    with pytest.raises(ValueError, match="metric 'auc'"):
        tp.compile(optimizer="adam", metrics=["auc"])


def test_the_example_runs_on_the_tiny_presets():
    repo = os.path.join(DATA, "..", "..")
    env = dict(os.environ, PYTHONPATH=os.path.join(repo, "python") + os.pathsep +
               os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, os.path.join(repo, "examples", "keras_hub_finetune.py")],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "variables split" in text and "transformer_layer_0/" in text  # the plan
    losses = [float(v) for v in re.findall(r"epoch \d+: loss ([0-9.]+)", text)]
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert float(re.search(r"largest logit difference: (\S+)", text).group(1)) < 1e-5
    assert re.search(r"tensor parallel on \S+: loss [0-9.]+ -> [0-9.]+, accuracy", text)


def run_example(name):
    repo = os.path.join(DATA, "..", "..")
    env = dict(os.environ, PYTHONPATH=os.path.join(repo, "python") + os.pathsep +
               os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, os.path.join(repo, "examples", name)],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_lora_example_runs_on_the_tiny_gemma_preset():
    text = run_example("keras_hub_lora.py")
    before = int(re.search(r"(\d+) parameters before LoRA", text).group(1))
    with_lora = int(re.search(r"(\d+) parameters with LoRA", text).group(1))
    # The Gemma fixture: 2 layers; rank-4 adapters on the query (a [C=24, 4 heads, 4],
    # b [4, head_dim 10]) and the value (a [24, 2 kv heads, 4], b [4, 10]).
    assert with_lora - before == 2 * ((24 * 4 * 4 + 4 * 10) + (24 * 2 * 4 + 4 * 10))
    losses = [float(v) for v in re.findall(r"epoch \d+: loss ([0-9.]+)", text)]
    assert len(losses) == 4 and losses[-1] < losses[0]
    assert "lora_kernel_a" in text  # the plan lists the adapters
    assert re.search(r"generated: \[5, 6, 7(, \d+){5}\]", text)
    assert float(re.search(r"reloaded adapters, largest logit difference: (\S+)",
                           text).group(1)) < 1e-4
    assert "reloaded adapters on model=2" in text


# LoRA (backbone.enable_lora: GPT-2, OPT, BERT, Phi-3, the Llama family)


def lora_fit(name, mesh=None, epochs=3):
    lm = causal_lm(name, mesh=mesh)
    x, y = lm_batch(lm.vocab_size)
    lm.backbone.enable_lora(rank=4)
    lm.compile(optimizer=autoshard.keras.optimizers.Adam(1e-2), sampler="greedy")
    return lm, x, y, lm.fit(x, y, batch_size=4, epochs=epochs)


def merged(lm, name):
    """A model without adapters whose query and value kernels are the LoRA
    model's merged as Keras defines it, kernel + alpha / rank * a @ b
    (einsum_dense.py), computed here in NumPy in Keras's (C, heads, D) form."""
    plain = causal_lm(name) if name in DECODERS else type(lm).from_preset(preset(name))
    native = lm._native
    paths = native.weight_paths()
    for path in paths:
        if ".lora_kernel_" in path:
            continue
        w = native.weight(path)
        scope = path[: -len("kernel")]
        if scope + "lora_kernel_a" in paths:
            a, b = native.weight(scope + "lora_kernel_a"), native.weight(scope + "lora_kernel_b")
            delta = (a @ b) * (4 / 4)  # [C, heads, D]; lora_alpha = rank
            # Keras's kernels are [C, heads, D] (GPT-2's MultiHeadAttention
            # too); the Hugging Face layouts' [heads..., D, C] (q: [K, G, D, C]).
            w = w + (delta if delta.shape == w.shape else
                     np.moveaxis(delta, 0, -1).reshape(w.shape))
        plain._native.set_weight(path, w)
    return plain


@pytest.mark.parametrize("name", ["gemma", "llama", "gpt2", "opt", "phi3"])
def test_lora_trains_the_adapters_only_and_is_kerass_merged_kernel(name):
    lm = causal_lm(name)
    x, y = lm_batch(lm.vocab_size)
    before = lm(x)
    paths_before = set(lm._native.weight_paths())
    lm.backbone.enable_lora(rank=4)
    np.testing.assert_array_equal(lm(x), before)  # b starts at zeros
    paths = lm._native.weight_paths()
    adapters = [p for p in paths if ".lora_kernel_" in p]
    assert set(paths) - set(adapters) == paths_before and len(adapters) == 8  # 2 layers, q and v
    start = {p: lm._native.weight(p).copy() for p in paths}
    lm.compile(optimizer=autoshard.keras.optimizers.Adam(1e-2), sampler="greedy")
    history = lm.fit(x, y, batch_size=4, epochs=3)
    assert history.history["loss"][-1] < history.history["loss"][0]
    changed = {p for p in paths if not np.array_equal(start[p], lm._native.weight(p))}
    assert changed == set(adapters)
    np.testing.assert_allclose(merged(lm, name)(x), lm(x), rtol=1e-4, atol=1e-5)
    # generate runs with the adapters: its first new token is the logits' argmax.
    prompt = {"token_ids": x["token_ids"][:1], "padding_mask": np.ones((1, 8))}
    prompt["padding_mask"][:, 5:] = 0
    out = lm.generate(prompt, stop_token_ids=None)["token_ids"][0]
    assert out[5] == lm({"token_ids": x["token_ids"][:1, :5]})[0, -1].argmax()


@pytest.mark.parametrize("name,mesh", [("gemma", m) for m in MESHES[1:]] +
                         [("gpt2", "model=2"), ("opt", "data=2,model=2"), ("phi3", "model=2")])
def test_sharded_lora_equals_one_device(name, mesh):
    _, x, _, one = lora_fit(name)
    lm, _, _, sharded = lora_fit(name, mesh=mesh)
    np.testing.assert_allclose(sharded.steps, one.steps, rtol=1e-4)
    assert any(".lora_kernel_" in line for line in lm.plan.explanation)  # planned like any weight


def test_lora_errors_are_clear(tmp_path):
    with pytest.raises(NotImplementedError, match="query and value projections only"):
        causal_lm("gemma").backbone.enable_lora(4, target_names=["ffw_linear"])
    lm = causal_lm("llama")
    lm.backbone.enable_lora(2)
    with pytest.raises(Exception, match="already enabled"):
        lm.backbone.enable_lora(2)
    with pytest.raises(Exception, match="LoRA adapters is not saved yet"):
        lm.save_to_preset(tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="must end in .lora.h5"):
        lm.backbone.save_lora_weights(str(tmp_path / "lora.h5"))
    with pytest.raises(ValueError, match="no LoRA-enabled layers"):
        causal_lm("llama").backbone.save_lora_weights(tmp_path / "x.lora.h5")


@pytest.mark.parametrize("name", ["bert", "roberta"])
def test_lora_on_an_encoder_trains_the_adapters_and_the_head(name, tmp_path):
    cls = getattr(keras_hub.models, f"{name.capitalize() if name == 'bert' else 'Roberta'}"
                                    "TextClassifier")
    model = cls.from_preset(preset(name))
    x, y = classification_task(vocab=model.vocab_size)
    before = model(x)
    paths_before = set(model._native.weight_paths())
    model.backbone.enable_lora(rank=4)
    np.testing.assert_array_equal(model(x), before)
    paths = model._native.weight_paths()
    adapters = {p for p in paths if ".lora_kernel_" in p}
    assert set(paths) - adapters == paths_before
    assert {p.split(".lora_kernel_")[0].rsplit(".", 1)[1] for p in adapters} == {"query", "value"}
    start = {p: model._native.weight(p).copy() for p in paths}
    model.compile(optimizer=autoshard.keras.optimizers.Adam(1e-2))
    history = model.fit(x, y, batch_size=8, epochs=4)
    assert history.history["loss"][-1] < history.history["loss"][0]
    changed = {p for p in paths if not np.array_equal(start[p], model._native.weight(p))}
    # KerasHub freezes the backbone (BERT's pooler with it), not the task's head.
    head = {p for p in paths if p.startswith(("classifier.", "classifier"))}
    assert head and changed == adapters | head, sorted(changed ^ (adapters | head))
    np.testing.assert_allclose(merged(model, name)(x), model(x), rtol=1e-4, atol=1e-5)
    with pytest.raises(Exception, match="LoRA adapters is not saved yet"):
        model.save_to_preset(tmp_path / "out")
    model.backbone.save_lora_weights(tmp_path / "enc.lora.h5")
    again = cls.from_preset(preset(name))
    again.backbone.load_lora_weights(tmp_path / "enc.lora.h5")
    for p in adapters:
        np.testing.assert_array_equal(again._native.weight(p), model._native.weight(p))
    sharded = cls.from_preset(preset(name), mesh="model=2")
    sharded.backbone.enable_lora(rank=4)
    sharded.compile(optimizer=autoshard.keras.optimizers.Adam(1e-2))
    for p in adapters:  # the same starting adapters (a is random)
        sharded._native.set_weight(p, start[p])
    np.testing.assert_allclose(sharded.fit(x, y, batch_size=8, epochs=4).steps, history.steps,
                               rtol=1e-3)


# LoRA files (Backbone.save_lora_weights / load_lora_weights)


@pytest.mark.parametrize("mesh", [None, "model=2"])
def test_saved_lora_weights_reload_into_a_fresh_model(tmp_path, mesh):
    lm, x, _, _ = lora_fit("llama")
    path = tmp_path / "adapter.lora.h5"
    lm.backbone.save_lora_weights(path)
    # KerasHub's layout (read by the generic HDF5 reader, not the LoRA one):
    # lora/vars/rank, then lora/<i>/vars/lora_kernel_{a,b} per adapted layer.
    names = sorted(name for name, _ in autoshard._native.read_weights_h5(str(path)))
    assert names == sorted(["lora/vars/rank"] + [f"lora/{i}/vars/lora_kernel_{k}"
                                                 for i in range(4) for k in "ab"])
    stored = dict(autoshard._native.read_weights_h5(str(path)))
    assert stored["lora/vars/rank"] == 4
    np.testing.assert_array_equal(stored["lora/1/vars/lora_kernel_b"],
                                  lm._native.weight("layers.0.self_attn.v_proj.lora_kernel_b"))
    fresh = causal_lm("llama", mesh=mesh)
    assert not np.allclose(fresh(x), lm(x), atol=1e-4)  # the adapters changed the logits
    fresh.backbone.load_lora_weights(str(path))  # enables LoRA at the file's rank
    assert fresh._native.lora_rank == 4
    if mesh is None:
        np.testing.assert_array_equal(fresh(x), lm(x))
    np.testing.assert_allclose(fresh(x), lm(x), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(merged(fresh, "llama")(x), lm(x), rtol=1e-4, atol=1e-5)


def test_lora_files_never_replace_a_file_and_check_what_they_load(tmp_path):
    lm, _, _, _ = lora_fit("llama", epochs=1)
    path = tmp_path / "mine.lora.h5"
    path.write_bytes(b"the user's file")
    with pytest.raises(FileExistsError, match="exists"):
        lm.backbone.save_lora_weights(path)
    assert path.read_bytes() == b"the user's file"
    assert os.listdir(tmp_path) == ["mine.lora.h5"]  # no temporary left behind
    good = tmp_path / "good.lora.h5"
    lm.backbone.save_lora_weights(good)
    other = causal_lm("llama")
    other.backbone.enable_lora(2)
    with pytest.raises(ValueError, match="rank of .* is 4.*rank=2"):
        other.backbone.load_lora_weights(good)
    with pytest.raises(ValueError, match="holds 4 adapted layers.*has 8|lora_kernel_a of shape"):
        causal_lm("gemma").backbone.load_lora_weights(good)
    with pytest.raises(FileNotFoundError):
        other.backbone.load_lora_weights(tmp_path / "none.lora.h5")
    # A file numbered by KerasHub's own layer walk (no autoshard order
    # attribute) is refused rather than mapped to the wrong layers.
    foreign = tmp_path / "keras.lora.h5"
    autoshard._native.write_lora_h5(str(foreign), 4, "", [])
    with pytest.raises(ValueError, match="KerasHub's layer walk"):
        other.backbone.load_lora_weights(foreign)
    plain = tmp_path / "plain.lora.h5"
    autoshard._native.write_weights_h5(str(plain), [("lora/0/vars/lora_kernel_a",
                                                     np.zeros((2, 2), np.float32))])
    with pytest.raises(Exception, match="no lora/vars/rank"):
        other.backbone.load_lora_weights(plain)


# Padded batches (KerasHub's sample_weight=padding_mask)


def padded_batch(vocab, ends, seed=1):
    x, y = lm_batch(vocab, n=len(ends), seed=seed)
    t = x["token_ids"].shape[1]
    mask = (np.arange(t) < np.array(ends)[:, None]).astype(np.int32)
    junk = tokens(vocab, y.shape, seed + 7)
    x["token_ids"] = np.where(mask == 1, x["token_ids"], junk)
    return {"token_ids": x["token_ids"], "padding_mask": mask}, np.where(mask == 1, y, junk[:, ::-1])


def test_a_padded_batch_trains_on_the_loss_of_its_unpadded_sequences():
    lm = causal_lm("llama")
    lm.compile(optimizer=autoshard.keras.optimizers.Adam(1e-2))
    ends = [8, 5, 3, 8]
    x, y = padded_batch(lm.vocab_size, ends)
    # The reference: each sequence alone, unpadded, its per-token losses
    # summed, over every position of the batch (Keras's sum_over_batch_size
    # with sample_weight: keras/src/losses/loss.py reduce_values).
    total = 0.0
    for row, n in enumerate(ends):
        logits = lm({"token_ids": x["token_ids"][row:row + 1, :n]})[0].astype(np.float64)
        log_z = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
        total += (log_z - logits[np.arange(n), y[row, :n]]).sum()
    expected = total / y.size
    assert lm.evaluate(x, y)[0] == pytest.approx(expected, rel=1e-5)
    history = lm.fit(x, y, batch_size=4, epochs=2, shuffle=False)
    assert history.steps[0] == pytest.approx(expected, rel=1e-4)
    # What the padded positions hold changes nothing.
    other = causal_lm("llama")
    other.compile(optimizer=autoshard.keras.optimizers.Adam(1e-2))
    x2, y2 = padded_batch(other.vocab_size, ends)
    mask = x2["padding_mask"] == 1
    x2["token_ids"] = np.where(mask, x2["token_ids"], 0)
    y2 = np.where(mask, y2, 1)
    np.testing.assert_allclose(other.fit(x2, y2, batch_size=4, epochs=2, shuffle=False).steps,
                               history.steps, rtol=1e-5)
    np.testing.assert_allclose(other(x2)[mask], lm(x)[mask], rtol=1e-4, atol=1e-5)


def test_a_sharded_padded_fit_equals_one_device():
    runs = []
    for mesh in (None, "model=2"):
        lm = causal_lm("gpt2", mesh=mesh)
        lm.compile(optimizer=autoshard.keras.optimizers.Adam(1e-2))
        x, y = padded_batch(lm.vocab_size, [8, 2, 6, 7])
        w = x["padding_mask"] * 0.5  # the preprocessor's sample_weight, given explicitly
        runs.append(lm.fit(x, y, sample_weight=w, batch_size=2, epochs=2).steps)
    np.testing.assert_allclose(runs[1], runs[0], rtol=1e-4)


def test_padding_on_the_left_or_bad_weights_are_clear_errors():
    lm = causal_lm("llama")
    x, y = padded_batch(lm.vocab_size, [8, 5])
    left = dict(x, padding_mask=x["padding_mask"][:, ::-1])
    with pytest.raises(ValueError, match="pad each sequence on the right"):
        lm.fit(left, y)
    with pytest.raises(ValueError, match="sample_weight has shape"):
        lm.fit(x, y, sample_weight=np.ones((2, 3)))
    with pytest.raises(ValueError, match="finite and 0 or more"):
        lm.fit(x, y, sample_weight=-np.ones(2))
