"""keras_hub.models.BertMaskedLM on the BERT fixture preset
(tests/data/keras_hub/bert, whose task is a TextClassifier: the masked-LM
head is new, on the preset's backbone). Checked against a NumPy forward
pass written here from the layer definitions (bert.h's weight layouts,
KerasHub's MaskedLMHead), one device for the sharded runs, and NumPy's loss
for the engine's."""

import json
import math
import os

import numpy as np
import pytest

import autoshard
import autoshard.keras_hub as keras_hub

HUB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data",
                   "keras_hub")
BERT = os.path.join(HUB, "bert")
V, S, M = 97, 8, 3  # the fixture's vocabulary; tokens and masks per sequence here

_erf = np.vectorize(math.erf)


def batch(n=8, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(2, V, (n, S))
    positions = np.stack([rng.choice(np.arange(1, S), M, replace=False) for _ in range(n)])
    y = np.take_along_axis(ids, positions, 1)
    masked = ids.copy()
    np.put_along_axis(masked, positions, 1, 1)  # token 1 stands for [MASK]
    mask = np.ones((n, S), np.int32)
    mask[0, -2:] = 0  # one padded row
    x = {"token_ids": masked, "segment_ids": (np.arange(S) >= S // 2).astype(np.int32)[None]
         .repeat(n, 0), "padding_mask": mask, "mask_positions": positions}
    return x, y


def masked_lm(**kwargs):
    return keras_hub.models.BertMaskedLM.from_preset(BERT, **kwargs)


def layer_norm(x, gamma, beta, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def gelu(x):
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def reference_logits(model, x, head_eps=1e-5):
    """BERT's post-LayerNorm encoder and KerasHub's MaskedLMHead in float64
    over the model's weights (autoshard's layouts: kernels (out, in), q/k/v
    [heads, head_dim, C])."""
    def w(name):
        return model._native.weight(name).astype(np.float64)

    ids, seg = x["token_ids"], x["segment_ids"]
    keep = x["padding_mask"].astype(np.float64)
    e = "embeddings."
    h = (w(e + "word_embeddings.embeddings")[ids] + w(e + "position_embeddings.embeddings")[:S]
         + w(e + "token_type_embeddings.embeddings")[seg])
    h = layer_norm(h, w(e + "LayerNorm.gamma"), w(e + "LayerNorm.beta"), 1e-12)
    key_bias = ((keep - 1) * 1e9)[:, None, None, :]
    for i in range(2):
        p = f"encoder.layer.{i}."
        a = p + "attention.self."
        q, k, v = (np.einsum("bsc,hdc->bshd", h, w(a + n + ".kernel")) + w(a + n + ".bias")
                   for n in ("query", "key", "value"))
        scores = np.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1]) + key_bias
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = np.einsum("bhqk,bkhd->bqhd", probs, v)
        o = p + "attention.output."
        out = np.einsum("bqhd,chd->bqc", context, w(o + "dense.kernel")) + w(o + "dense.bias")
        h = layer_norm(h + out, w(o + "LayerNorm.gamma"), w(o + "LayerNorm.beta"), 1e-12)
        f = gelu(h @ w(p + "intermediate.dense.kernel").T + w(p + "intermediate.dense.bias"))
        f = f @ w(p + "output.dense.kernel").T + w(p + "output.dense.bias")
        h = layer_norm(h + f, w(p + "output.LayerNorm.gamma"), w(p + "output.LayerNorm.beta"),
                       1e-12)
    # MaskedLMHead: gather, Dense + GELU, LayerNorm (1e-5), tied embeddings, output_bias.
    g = np.take_along_axis(h, x["mask_positions"][..., None], 1)
    t = "cls.predictions.transform."
    g = gelu(g @ w(t + "dense.kernel").T + w(t + "dense.bias"))
    g = layer_norm(g, w(t + "LayerNorm.gamma"), w(t + "LayerNorm.beta"), head_eps)
    return g @ w("embeddings.word_embeddings.embeddings").T + w("cls.predictions.bias")


def test_logits_are_kerashubs_masked_lm_head_at_the_mask_positions():
    model = masked_lm()
    x, _ = batch()
    # A small head kernel keeps the head's LayerNorm input near 0, where its
    # epsilon (KerasHub's 1e-5, not BERT's 1e-12) decides the output.
    t = "cls.predictions.transform.dense."
    model._native.set_weight(t + "kernel", model._native.weight(t + "kernel") * 1e-3)
    model._native.set_weight(t + "bias", np.full(24, 1e-3, np.float32))
    logits = model(x)
    assert logits.shape == (8, M, V)
    np.testing.assert_allclose(logits, reference_logits(model, x), rtol=1e-4, atol=1e-4)
    assert np.abs(logits - reference_logits(model, x, head_eps=1e-12)).max() > 1e-2
    np.testing.assert_array_equal(model.predict(x), logits)
    # The backbone is the preset's: the classifier's pooler and embeddings.
    clf = keras_hub.models.BertTextClassifier.from_preset(BERT)
    for name in ("embeddings.word_embeddings.embeddings", "encoder.layer.1.output.dense.kernel",
                 "pooler.dense.kernel"):
        np.testing.assert_array_equal(model._native.weight(name), clf._native.weight(name))


def test_fit_loss_is_kerass_weighted_loss_over_the_masked_positions():
    model = masked_lm()
    x, y = batch()
    w = np.ones(y.shape, np.float32)
    w[:, -1] = 0  # the preprocessor's padding of mask_positions
    w[1, 0] = 2.5
    x["mask_positions"][2, 1] = x["mask_positions"][2, 0]  # one token masked twice
    y[2, 1] = y[2, 0]
    expected = model.evaluate(x, y, sample_weight=w)[0]  # NumPy over the logits
    model.compile(optimizer=autoshard.keras.optimizers.SGD(1e-3))  # the loss before the step
    history = model.fit(x, y, sample_weight=w, batch_size=8, epochs=1)
    assert history.steps[0] == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("mesh", ["model=2", "data=2,model=2"])
def test_sharded_masked_lm_equals_one_device(mesh):
    runs = []
    for m in (None, mesh):
        model = masked_lm(mesh=m)
        x, y = batch()
        model.compile(optimizer=autoshard.keras.optimizers.Adam(1e-2))
        runs.append((model.fit(x, y, batch_size=4, epochs=2).steps, model(x), model))
    np.testing.assert_allclose(runs[1][0], runs[0][0], rtol=1e-5)
    np.testing.assert_allclose(runs[1][1], runs[0][1], rtol=1e-4, atol=1e-5)
    assert runs[1][2].mesh == mesh


def test_a_masked_lm_learns_a_tiny_task():
    # The masked token is always its left neighbour plus one.
    rng = np.random.default_rng(1)
    n = 32
    start = rng.integers(2, V - S, (n, 1))
    ids = start + np.arange(S)
    positions = rng.integers(1, S, (n, 1))
    y = np.take_along_axis(ids, positions, 1)
    masked = ids.copy()
    np.put_along_axis(masked, positions, 1, 1)
    x = {"token_ids": masked, "mask_positions": positions}
    model = masked_lm()
    model.compile(optimizer=autoshard.keras.optimizers.Adam(3e-3))
    before = model.evaluate(x, y)
    history = model.fit(x, y, batch_size=8, epochs=8)
    after = model.evaluate(x, y)
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert after[0] < before[0] - 1.0 and after[1] > before[1]


def test_saved_masked_lm_preset_reloads_with_its_head(tmp_path):
    model = masked_lm()
    x, y = batch()
    model.compile(optimizer=autoshard.keras.optimizers.Adam(1e-2))
    model.fit(x, y, batch_size=8)
    model.save_to_preset(tmp_path / "mlm")
    task = json.load(open(tmp_path / "mlm" / "task.json"))
    assert task["class_name"] == "BertMaskedLM"
    # Task.save_task_weights's datasets: the head's group after its class.
    head = dict(autoshard._native.read_weights_h5(str(tmp_path / "mlm" / "task.weights.h5")))
    assert sorted(head) == ["layers/masked_lm_head/_intermediate_dense/vars/0",
                            "layers/masked_lm_head/_intermediate_dense/vars/1",
                            "layers/masked_lm_head/_intermediate_layer_norm/vars/0",
                            "layers/masked_lm_head/_intermediate_layer_norm/vars/1",
                            "layers/masked_lm_head/vars/0"]
    np.testing.assert_array_equal(head["layers/masked_lm_head/vars/0"],
                                  model._native.weight("cls.predictions.bias"))
    np.testing.assert_array_equal(  # Keras's (in, out) kernel
        head["layers/masked_lm_head/_intermediate_dense/vars/0"],
        model._native.weight("cls.predictions.transform.dense.kernel").T)
    again = keras_hub.models.BertMaskedLM.from_preset(tmp_path / "mlm", mesh="model=2")
    np.testing.assert_allclose(again(x), model(x), rtol=1e-5, atol=1e-5)
    # The backbone keeps its pooler (frozen: a masked LM does not use it).
    backbone = keras_hub.models.BertBackbone.from_preset(tmp_path / "mlm")
    assert isinstance(backbone._task, keras_hub.models.MaskedLM)
    clf = keras_hub.models.BertTextClassifier.from_preset(tmp_path / "mlm", num_classes=3)
    original = keras_hub.models.BertTextClassifier.from_preset(BERT)
    np.testing.assert_array_equal(clf._native.weight("pooler.dense.kernel"),
                                  original._native.weight("pooler.dense.kernel"))
    with pytest.raises(ValueError, match="give num_classes"):
        keras_hub.models.BertTextClassifier.from_preset(tmp_path / "mlm")


def test_lora_on_a_masked_lm_trains_the_adapters_and_the_head():
    model = masked_lm()
    x, y = batch()
    model.backbone.enable_lora(rank=2)
    paths = model._native.weight_paths()
    before = {p: model._native.weight(p) for p in paths}
    model.compile(optimizer=autoshard.keras.optimizers.Adam(1e-2))
    model.fit(x, y, batch_size=4, epochs=2)
    changed = {p for p in paths if not np.array_equal(model._native.weight(p), before[p])}
    # The adapters and the task's head; not the backbone (the tied word
    # embeddings and the pooler included).
    assert changed == {p for p in paths if ".lora_kernel_" in p or p.startswith("cls.")}


def test_masked_lm_bad_input_is_one_clear_error():
    with pytest.raises(AttributeError, match="RobertaMaskedLM.*BertMaskedLM"):
        keras_hub.models.RobertaMaskedLM  # noqa: B018
    with pytest.raises(ValueError, match="RobertaBackbone, not a BertBackbone"):
        keras_hub.models.BertMaskedLM.from_preset(os.path.join(HUB, "roberta"))
    model = masked_lm()
    x, y = batch()
    with pytest.raises(ValueError, match="mask_positions"):
        model({"token_ids": x["token_ids"]})
    with pytest.raises(ValueError, match="one label per masked position"):
        model.fit(x, y[:, :2])
    bad = dict(x, mask_positions=x["mask_positions"] + S)
    with pytest.raises(ValueError, match="must be token positions"):
        model(bad)
    with pytest.raises(ValueError, match="cross-entropy"):
        model.compile(loss="mse")


def preset_with_tokenizer(tmp_path):
    """The BERT fixture with the WordPiece tokenizer preset's files (its 24
    ids lie in the fixture's vocabulary)."""
    import shutil

    out = tmp_path / "bert_text"
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(BERT, out)
    words = os.path.join(HUB, "tokenizers", "wordpiece")
    shutil.copy(os.path.join(words, "tokenizer.json"), out)
    shutil.copytree(os.path.join(words, "assets"), out / "assets")
    return out


def test_text_goes_through_kerashubs_masking(tmp_path):
    import math

    model = keras_hub.models.BertMaskedLM.from_preset(preset_with_tokenizer(tmp_path))
    pre = model.preprocessor
    assert isinstance(pre, keras_hub.models.BertMaskedLMPreprocessor)
    assert pre.sequence_length == 20  # the backbone's positions (no preprocessor.json)
    texts = ["hello worlds, hello world.", "don't", "unaffable cafe !", "a b c hello"] * 50
    x, y, w = pre(texts)
    tok = model.tokenizer
    cls, sep, pad, mask = (tok.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]", "[MASK]"))
    masked = replaced = chosen = 0
    for row, text in enumerate(texts):
        body = tok.encode(text, add_special_tokens=False)
        n = len(body)
        original = [cls, *body, sep] + [pad] * (20 - n - 2)
        count = math.ceil(0.15 * n)  # RandomItemSelector: ceil(rate * selectable)
        pos = x["mask_positions"][row]
        assert list(w[row]) == [1] * count + [0] * (96 - count)
        assert all(1 <= p <= n for p in pos[:count]) and list(pos[:count]) == sorted(pos[:count])
        assert list(y[row, :count]) == [original[p] for p in pos[:count]]
        assert list(x["padding_mask"][row]) == [True] * (n + 2) + [False] * (18 - n)
        unchosen = [i for i in range(20) if i not in set(pos[:count])]
        assert [x["token_ids"][row, i] for i in unchosen] == [original[i] for i in unchosen]
        got = x["token_ids"][row, pos[:count]]
        masked += int((got == mask).sum())
        replaced += int((got != mask).sum())
        chosen += count
    assert 0.7 < masked / chosen < 0.9  # mask_token_rate 0.8; the rest random or kept
    model.compile(optimizer=autoshard.keras.optimizers.Adam(1e-2))
    history = model.fit(texts[:16], batch_size=8, epochs=2)
    assert len(history.steps) == 4 and all(np.isfinite(history.steps))
    assert len(model.evaluate(texts[:8])) == 2
    assert model.predict(texts[:2]).shape == (2, 96, V)
    with pytest.raises(ValueError, match="labels come from the masking"):
        model.fit(texts[:4], np.zeros((4, 96), np.int32))
    with pytest.raises(ValueError, match="no tokenizer"):
        masked_lm().fit(texts[:4])
    plain = keras_hub.models.BertMaskedLM.from_preset(preset_with_tokenizer(tmp_path / "b"),
                                                      preprocessor=None)  # KerasHub's opt-out
    with pytest.raises(ValueError, match="no tokenizer"):
        plain.predict(texts[:1])
