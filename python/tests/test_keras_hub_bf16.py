"""from_preset(dtype="bfloat16") then backbone.enable_lora: the frozen base
held in bfloat16 (Model::hold_frozen_weights_in_bf16). Checked against the
float32 model whose base weights were rounded to bfloat16 here in NumPy
(round to nearest even on the bit patterns, written in this file), and
sharded against one device; the held bytes against the weights' sizes."""

import os

import numpy as np
import pytest

import autoshard
import autoshard.keras_hub as keras_hub

HUB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data",
                   "keras_hub")
CLASSES = {"gemma": "GemmaCausalLM", "llama": "LlamaCausalLM", "gpt2": "GPT2CausalLM"}


def causal_lm(name, **kwargs):
    return getattr(keras_hub.models, CLASSES[name]).from_preset(os.path.join(HUB, name), **kwargs)


def bf16_round(a):
    """float32 -> bfloat16 -> float32, to nearest even (finite values)."""
    bits = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return rounded.astype(np.uint32).view(np.float32)


def batch(vocab, n=8, t=9, seed=0):
    ids = np.random.default_rng(seed).integers(0, vocab, (n, t)).astype(np.int32)
    return {"token_ids": ids[:, :-1], "padding_mask": np.ones((n, t - 1), np.int32)}, ids[:, 1:]


def lora(name, **kwargs):
    lm = causal_lm(name, **kwargs)
    lm.backbone.enable_lora(rank=4)
    lm.compile(optimizer=autoshard.keras.optimizers.Adam(1e-2), sampler="greedy")
    return lm


def test_bf16_round_is_round_to_nearest_even():
    one = np.float32(1.0)
    ulp = np.float32(2.0 ** -7)  # bfloat16's spacing at 1
    np.testing.assert_array_equal(
        bf16_round([one + ulp / 2, one + ulp * 1.5, one + ulp * 0.75, -3.0]),
        np.float32([1.0, 1.0 + 2 * ulp, 1.0 + ulp, -3.0]))


@pytest.mark.parametrize("name", ["gemma", "llama", "gpt2"])
def test_a_bfloat16_base_trains_as_float32_over_rounded_weights_in_half_the_bytes(name):
    held = lora(name, dtype="bfloat16")
    plain = lora(name)
    x, y = batch(held.vocab_size)
    paths = held._native.weight_paths()
    bf16 = [p for p in paths if held._native.weight_dtype(p) == "bfloat16"]
    adapters = [p for p in paths if ".lora_kernel_" in p]
    assert bf16 and not set(bf16) & set(adapters)
    assert any(".kernel" in p or "kernel" in p.split(".")[-1] for p in bf16)
    for p in adapters:  # the same adapters to start from (a is drawn)
        plain._native.set_weight(p, held._native.weight(p))
    for p in bf16:
        w = plain._native.weight(p)
        np.testing.assert_array_equal(held._native.weight(p), bf16_round(w))
        plain._native.set_weight(p, bf16_round(w))
    np.testing.assert_allclose(held(x), plain(x), rtol=1e-5, atol=1e-6)
    a = held.fit(x, y, batch_size=4, epochs=2)
    b = plain.fit(x, y, batch_size=4, epochs=2)
    np.testing.assert_allclose(a.steps, b.steps, rtol=1e-5)
    for p in adapters:
        np.testing.assert_allclose(held._native.weight(p), plain._native.weight(p), rtol=1e-4,
                                   atol=1e-6)
    elements = {p: held._native.weight(p).size for p in paths}
    held_bytes = sum(2 * elements[p] if p in bf16 else 4 * elements[p] for p in paths)
    assert held._native.weight_bytes() == held_bytes
    assert plain._native.weight_bytes() == 4 * sum(elements.values())
    base = sum(elements[p] for p in bf16)
    assert base > 0.5 * sum(elements.values())  # most of the model is held in half


def test_a_bfloat16_encoder_base_trains_as_float32_over_rounded_weights():
    def classifier(**kwargs):
        m = keras_hub.models.BertTextClassifier.from_preset(os.path.join(HUB, "bert"), **kwargs)
        m.backbone.enable_lora(rank=4)
        m.compile(optimizer=autoshard.keras.optimizers.Adam(1e-2))
        return m

    held, plain = classifier(dtype="bfloat16"), classifier()
    ids = np.random.default_rng(0).integers(0, held.vocab_size, (8, 6)).astype(np.int32)
    x = {"token_ids": ids, "segment_ids": np.zeros((8, 6), np.int32),
         "padding_mask": np.ones((8, 6), np.int32)}
    y = np.arange(8) % 2
    paths = held._native.weight_paths()
    bf16 = [p for p in paths if held._native.weight_dtype(p) == "bfloat16"]
    assert bf16 and not any(p.startswith("classifier") or ".lora_kernel_" in p for p in bf16)
    for p in paths:
        w = plain._native.weight(p)
        plain._native.set_weight(p, bf16_round(w) if p in bf16 else held._native.weight(p))
    np.testing.assert_allclose(held.fit(x, y, batch_size=8, epochs=3).steps,
                               plain.fit(x, y, batch_size=8, epochs=3).steps, rtol=1e-5)


@pytest.mark.parametrize("mesh", ["model=2", "data=2,model=2"])
def test_a_sharded_bfloat16_base_equals_one_device(mesh):
    one = lora("gemma", dtype="bfloat16")
    x, y = batch(one.vocab_size)
    sharded = lora("gemma", dtype="bfloat16", mesh=mesh)
    for p in sharded._native.weight_paths():
        if ".lora_kernel_" in p:
            sharded._native.set_weight(p, one._native.weight(p))
    np.testing.assert_allclose(sharded.fit(x, y, batch_size=4, epochs=2).steps,
                               one.fit(x, y, batch_size=4, epochs=2).steps, rtol=1e-5)
    assert sharded._native.weight_dtype("layers.0.self_attn.q_proj.kernel") == "bfloat16"


def test_dtype_is_float32_or_bfloat16():
    with pytest.raises(ValueError, match="pass dtype='float32' or 'bfloat16'"):
        causal_lm("gemma", dtype="float16")
    lm = causal_lm("gemma", dtype="bfloat16")
    # Nothing is frozen before enable_lora: every weight stays float32.
    assert all(lm._native.weight_dtype(p) == "float32" for p in lm._native.weight_paths())
