"""autoshard.from_pretrained against the command line: the same fixture
(tests/data/hf_*) gives the same greedy ids as `autoshard generate` on one
device and on model=2, and the same losses as `autoshard train` (bit for bit
on one device)."""

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import autoshard

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data")
DECODERS = ["hf_gpt2", "hf_llama", "hf_mistral", "hf_qwen2", "hf_gemma", "hf_gemma2", "hf_opt",
            "hf_phi3"]


def cli():
    """The command line binary (ctest sets AUTOSHARD_CLI; else beside the reference)."""
    path = os.environ.get("AUTOSHARD_CLI")
    if not path and os.environ.get("AUTOSHARD_PY_REFERENCE"):
        ref = os.environ["AUTOSHARD_PY_REFERENCE"]
        path = os.path.join(os.path.dirname(os.path.dirname(ref)), "autoshard")
    if not path or not os.path.exists(path):
        pytest.skip("the autoshard binary is not built (AUTOSHARD_CLI)")
    return path


def run_cli(*args):
    out = subprocess.run([cli(), *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def cli_generate(*args):
    return json.loads(run_cli("generate", "--json", *args).strip().splitlines()[-1])


def fixture(name):
    return os.path.join(DATA, name)


@pytest.mark.parametrize("name", DECODERS)
@pytest.mark.parametrize("mesh", [None, "model=2"])
def test_greedy_ids_equal_autoshard_generate(name, mesh):
    model = autoshard.from_pretrained(fixture(name), mesh=mesh)
    got = model.generate([5, 9, 3], max_new_tokens=6, temperature=0)
    args = ["--weights", fixture(name), "--prompt-ids", "5,9,3", "--max-new-tokens", "6",
            "--temperature", "0"]
    want = cli_generate(*args, *(["--mesh", mesh] if mesh else []))["output_ids"]
    assert got == want
    assert ("model=2" in model.mesh) if mesh else model.mesh == ""


def test_sampling_equals_autoshard_generate_with_a_seed():
    model = autoshard.from_pretrained(fixture("hf_llama"), seed=7)
    got = model.generate(np.array([5, 9, 3]), max_new_tokens=8, temperature=0.8, top_k=20,
                         top_p=0.9)
    want = cli_generate("--weights", fixture("hf_llama"), "--prompt-ids", "5,9,3",
                        "--max-new-tokens", "8", "--temperature", "0.8", "--top-k", "20",
                        "--top-p", "0.9", "--seed", "7")["output_ids"]
    assert got == want
    # The same seed again gives the same tokens; another seed (almost surely) others.
    assert model.generate([5, 9, 3], max_new_tokens=8, temperature=0.8, top_k=20,
                          top_p=0.9) == got


def test_a_devicemesh_object_is_a_mesh():
    mesh = autoshard.keras.distribution.DeviceMesh((1, 2), ("data", "model"))
    model = autoshard.from_pretrained(fixture("hf_gpt2"), mesh=mesh, plan="megatron")
    ids = model.generate([1, 2, 3], max_new_tokens=4, temperature=0)
    assert "model=2" in model.mesh
    assert ids == autoshard.from_pretrained(fixture("hf_gpt2")).generate(
        [1, 2, 3], max_new_tokens=4, temperature=0)


def test_fsdp_generates_as_one_device_and_needs_a_data_axis():
    one = autoshard.from_pretrained(fixture("hf_llama")).generate([5, 9, 3], max_new_tokens=5,
                                                                  temperature=0)
    for where in (dict(mesh="data=2,model=2"), dict(devices=3)):
        model = autoshard.from_pretrained(fixture("hf_llama"), plan="fsdp", **where)
        assert model.generate([5, 9, 3], max_new_tokens=5, temperature=0) == one
    with pytest.raises(ValueError, match="fsdp"):
        autoshard.from_pretrained(fixture("hf_llama"), plan="fsdp", mesh="model=2").generate(
            [5, 9, 3], max_new_tokens=1)


def test_devices_lets_autoshard_pick_the_mesh_as_the_cli_does():
    model = autoshard.from_pretrained(fixture("hf_llama"), devices=2)
    got = model.generate([5, 9, 3], max_new_tokens=6, temperature=0)
    want = cli_generate("--weights", fixture("hf_llama"), "--devices", "2", "--prompt-ids",
                        "5,9,3", "--max-new-tokens", "6", "--temperature", "0")["output_ids"]
    assert got == want and model.mesh != ""
    with pytest.raises(ValueError, match="either mesh or devices"):
        autoshard.from_pretrained(fixture("hf_llama"), devices=2, mesh="model=2")


def tokens_file(tmp_path, tokens):
    path = tmp_path / "tokens.bin"
    np.asarray(tokens, dtype="<u2").tofile(path)
    return str(path)


def cli_losses(tmp_path, *args):
    log = tmp_path / "log.jsonl"
    run_cli("train", "--sample", "0", "--log", str(log), "--overwrite", *args)
    return [json.loads(line)["loss"] for line in log.read_text().splitlines()]


@pytest.mark.parametrize("name", ["hf_gpt2", "hf_llama", "hf_opt"])
def test_fit_losses_equal_autoshard_train_bit_for_bit(tmp_path, name):
    model = autoshard.from_pretrained(fixture(name), seed=3)
    tokens = np.random.default_rng(0).integers(0, model.vocab_size, 600)
    losses = model.fit(tokens, batch_size=2, seq_len=8, steps=4, learning_rate=3e-3)
    want = cli_losses(tmp_path, "--weights", fixture(name), "--data", tokens_file(tmp_path, tokens),
                      "--batch", "2", "--seq", "8", "--steps", "4", "--lr", "3e-3", "--seed", "3")
    assert losses == want
    assert len(losses) == 4


def test_fit_on_model_2_matches_autoshard_train(tmp_path):
    model = autoshard.from_pretrained(fixture("hf_llama"), mesh="model=2", plan="megatron")
    tokens = np.arange(400) % model.vocab_size
    losses = model.fit(tokens, batch_size=2, seq_len=8, steps=3, sampling="sequential",
                       lr_schedule="constant")
    want = cli_losses(tmp_path, "--weights", fixture("hf_llama"),
                      "--data", tokens_file(tmp_path, tokens), "--batch", "2", "--seq", "8",
                      "--steps", "3", "--sampling", "sequential", "--lr-schedule", "constant",
                      "--mesh", "model=2", "--plan", "megatron")
    np.testing.assert_allclose(losses, want, rtol=1e-6)
    # And one device agrees to float rounding.
    one = autoshard.from_pretrained(fixture("hf_llama")).fit(
        tokens, batch_size=2, seq_len=8, steps=3, sampling="sequential", lr_schedule="constant")
    np.testing.assert_allclose(losses, one, rtol=1e-4)


def test_fit_epochs_generate_after_training_and_save(tmp_path):
    model = autoshard.from_pretrained(fixture("hf_gpt2"))
    tokens = np.arange(161) % 67  # (161 - 1) // (2 * 8) = 10 batches an epoch
    losses = model.fit(tokens, batch_size=2, seq_len=8, epochs=2, sampling="sequential",
                       learning_rate=1e-2)
    assert len(losses) == 20 and losses[-1] < losses[0]
    ids = model.generate([1, 2, 3], max_new_tokens=5, temperature=0)
    model.save(tmp_path / "trained")
    again = autoshard.from_pretrained(tmp_path / "trained")
    assert again.generate([1, 2, 3], max_new_tokens=5, temperature=0) == ids
    np.testing.assert_array_equal(again.logits([[1, 2, 3]]), model.logits([[1, 2, 3]]))


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        body = f.read()
    kinds = {"F32": np.float32, "I32": np.int32, "I64": np.int64}
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(body[a:b], dtype=kinds[v["dtype"]]).reshape(v["shape"])
    return out


def test_logits_are_pytorchs():
    ref = read_safetensors(os.path.join(DATA, "hf_gpt2_logits.safetensors"))
    model = autoshard.from_pretrained(fixture("hf_gpt2"), mesh="model=2")
    got = model(ref["x"])
    np.testing.assert_allclose(got, ref["logits"], rtol=1e-4, atol=1e-5)


def test_text_in_text_out_through_the_directorys_tokenizer(tmp_path):
    # A GPT-2 of the byte_bpe tokenizer's 271 ids, saved with that tokenizer.
    config = json.load(open(os.path.join(DATA, "hf_gpt2", "config.json")))
    config["vocab_size"] = 271
    (tmp_path / "config.json").write_text(json.dumps(config))
    autoshard.LanguageModel.from_config(tmp_path / "config.json", seed=5).save(tmp_path / "m")
    shutil.copy(os.path.join(DATA, "tokenizers", "byte_bpe", "tokenizer.json"), tmp_path / "m")
    model = autoshard.from_pretrained(tmp_path / "m")
    assert model.tokenizer.encode("Hello world") == [267, 263]
    text = model.generate("Hello world", max_new_tokens=5, temperature=0)
    want = cli_generate("--weights", str(tmp_path / "m"), "--prompt", "Hello world",
                        "--max-new-tokens", "5", "--temperature", "0")
    assert text == want["text"] and text.startswith("Hello world")
    assert model.generate([267, 263], max_new_tokens=5, temperature=0) == want["output_ids"]
    # Text to train on goes through the tokenizer, as train --data FILE.txt reads it.
    text = "Hello world, the world's end.\n" * 20
    (tmp_path / "text.txt").write_text(text)
    losses = model.fit(text, batch_size=2, seq_len=8, steps=3)
    assert losses == cli_losses(tmp_path, "--weights", str(tmp_path / "m"), "--data",
                                str(tmp_path / "text.txt"), "--batch", "2", "--seq", "8",
                                "--steps", "3")


def test_eos_stops_unless_ignored():
    model = autoshard.from_pretrained(fixture("hf_llama"))  # eos_token_id 2
    free = model.generate([5, 9, 3], max_new_tokens=40, temperature=1.0, seed=1, ignore_eos=True)
    stopped = model.generate([5, 9, 3], max_new_tokens=40, temperature=1.0, seed=1)
    if 2 in free:
        assert stopped == free[:free.index(2) + 1]
    else:
        assert stopped == free


def test_bad_arguments_raise_value_and_os_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        autoshard.from_pretrained(tmp_path / "missing")
    with pytest.raises(ValueError, match="float32"):
        autoshard.from_pretrained(fixture("hf_gpt2"), dtype="bfloat16")
    with pytest.raises(ValueError, match="mesh"):
        autoshard.from_pretrained(fixture("hf_gpt2"), mesh=3)
    with pytest.raises(ValueError, match="plan 'nonsense'"):
        autoshard.from_pretrained(fixture("hf_gpt2"), plan="nonsense")
    (tmp_path / "config.json").write_text(open(os.path.join(DATA, "hf_gpt2", "config.json")).read())
    with pytest.raises(ValueError, match="has no weights"):
        autoshard.from_pretrained(tmp_path)
    model = autoshard.from_pretrained(fixture("hf_gpt2"))
    with pytest.raises(ValueError, match="outside the model's vocabulary"):
        model.generate([1, 500], max_new_tokens=2)
    with pytest.raises(ValueError, match="n_positions"):
        model.generate([1, 2], max_new_tokens=100)
    with pytest.raises(ValueError, match="needs a tokenizer"):
        model.generate("text")
    with pytest.raises(ValueError, match="steps or epochs"):
        model.fit(np.arange(100) % 67, batch_size=2, seq_len=8)
    with pytest.raises(ValueError, match="outside"):
        model.fit(np.arange(100) + 60, batch_size=2, seq_len=8, steps=1)
    with pytest.raises(ValueError, match="seq_len"):
        model.fit(np.arange(100) % 67, batch_size=2, seq_len=17, steps=1)
    with pytest.raises(ValueError, match="a sequence of seq_len 8 needs 9"):
        model.fit(np.arange(5), batch_size=2, seq_len=8, steps=1)
    with pytest.raises(ValueError, match="smaller batch_size"):
        model.fit(np.arange(10), batch_size=2, seq_len=8, steps=1, sampling="sequential")
    with pytest.raises(ValueError, match="mesh"):
        autoshard.from_pretrained(fixture("hf_gpt2"), mesh="model=")


INTERRUPTED = textwrap.dedent("""
    import os, signal, sys, threading
    import numpy as np
    import autoshard
    model = autoshard.from_pretrained(sys.argv[1])
    steps = []
    def on_step(step, loss):
        steps.append(step)
        if step == 2:
            os.kill(os.getpid(), signal.SIGINT)
    def on_token(token):
        steps.append(token)
        if len(steps) == 3:
            os.kill(os.getpid(), signal.SIGINT)
    try:
        if sys.argv[2] == "fit":
            model.fit(np.arange(2000) % 67, batch_size=2, seq_len=8, steps=1000, on_step=on_step)
        else:
            model.generate([1, 2], max_new_tokens=12, temperature=1.0, on_token=on_token)
    except KeyboardInterrupt:
        print("interrupted after", len(steps))
        sys.exit(0)
    print("not interrupted")
""")


@pytest.mark.parametrize("what", ["fit", "generate"])
def test_ctrl_c_stops_at_the_next_step_with_keyboardinterrupt(what):
    out = subprocess.run([sys.executable, "-c", INTERRUPTED, fixture("hf_gpt2"), what],
                         capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "interrupted after 3", out.stdout


def test_sigint_from_outside_stops_fit():
    script = textwrap.dedent("""
        import sys, numpy as np, autoshard
        model = autoshard.from_pretrained(sys.argv[1])
        try:
            print("ready", flush=True)
            model.fit(np.arange(2000) % 67, batch_size=2, seq_len=8, steps=10**7)
        except KeyboardInterrupt:
            print("KeyboardInterrupt", flush=True)
    """)
    p = subprocess.Popen([sys.executable, "-c", script, fixture("hf_gpt2")], text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    try:
        assert p.stdout.readline().strip() == "ready"
        import time

        time.sleep(0.5)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    assert out.strip() == "KeyboardInterrupt"


@pytest.mark.parametrize("name", ["bert", "roberta", "bert_mlm", "roberta_mlm"])
@pytest.mark.parametrize("mesh", [None, "model=2"])
def test_bert_and_roberta_logits_are_pytorchs(name, mesh):
    ref = read_safetensors(os.path.join(DATA, f"{name}_reference.safetensors"))
    model = autoshard.from_pretrained(fixture(f"hf_{name}"), mesh=mesh)
    assert isinstance(model, autoshard.EncoderModel)
    got = model(ref["token_ids"], ref["segment_ids"], ref["padding_mask"])
    np.testing.assert_allclose(got, ref["logits"], rtol=1e-4, atol=1e-5)
    # One sequence in, one out; a second length builds again with the same weights.
    one = model.logits(ref["token_ids"][0], ref["segment_ids"][0], ref["padding_mask"][0])
    np.testing.assert_allclose(one, ref["logits"][0], rtol=1e-4, atol=1e-5)
    assert model.logits(ref["token_ids"][:, :3]).shape[0] == ref["token_ids"].shape[0]
    with pytest.raises(ValueError, match="encoder"):
        model.generate([1, 2])


def test_an_encoder_saves_and_loads_back(tmp_path):
    ref = read_safetensors(os.path.join(DATA, "bert_reference.safetensors"))
    model = autoshard.from_pretrained(fixture("hf_bert"))
    model.save(tmp_path / "out")
    again = autoshard.from_pretrained(tmp_path / "out")
    np.testing.assert_array_equal(again(ref["token_ids"]), model(ref["token_ids"]))


def test_a_byte_level_preset_trains_on_text_as_the_cli_does(tmp_path):
    text = "The quick brown fox jumps over the lazy dog. " * 20
    (tmp_path / "t.txt").write_text(text)
    model = autoshard.LanguageModel.from_config("tiny", seed=4)
    assert model.vocab_size == 256
    losses = model.fit(text, batch_size=2, seq_len=16, steps=3)
    assert losses == cli_losses(tmp_path, "--model", "tiny", "--data", str(tmp_path / "t.txt"),
                                "--batch", "2", "--seq", "16", "--steps", "3", "--seed", "4")
    assert model.generate("The ", max_new_tokens=4, temperature=0).startswith("The ")
