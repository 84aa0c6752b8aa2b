#!/usr/bin/python3
"""bench_keras_layers's models from Python, with NumPy imported first.

    PYTHONPATH=python /usr/bin/python3 bench/keras_layers.py --model resnet|lstm|gru [--steps 5]

As 10 of 18 official Keras examples do, this script imports NumPy (and with
it Debian's OpenBLAS) before autoshard, then builds the models of
bench/keras_layers.cc through `autoshard.keras` (a ResNet-18-style CNN on
32x32x3 images at batch 64; an Embedding + 2 x LSTM(512) + Dense language
model at batch 32, 64 steps, vocabulary 1000, or the same with GRU(512)),
compiles them with SGD (momentum 0.9) and sparse categorical cross-entropy on
the logits, and times `train_on_batch` after one warm-up step. Prints one
JSON line (the median and fastest step, the BLAS autoshard runs) for
bench/keras_layers.sh.
"""

import numpy as np  # first, on purpose

import argparse
import json
import time

import autoshard
import autoshard.keras as keras
from autoshard.keras import layers


def conv(filters, size, stride=1, activation=None):
    return layers.Conv2D(filters, size, strides=stride, padding="same", activation=activation)


def basic_block(x, cin, cout, stride):
    """Two 3x3 convolutions and the shortcut (a 1x1 projection where the
    shape changes), summed, then relu."""
    y = conv(cout, 3, stride, "relu")(x)
    y = conv(cout, 3)(y)
    shortcut = x if stride == 1 and cin == cout else conv(cout, 1, stride)(x)
    return layers.Activation("relu")(layers.Add()([y, shortcut]))


def resnet18():
    inputs = keras.Input((32, 32, 3))
    x = conv(64, 3, 1, "relu")(inputs)
    channels = 64
    for width in (64, 128, 256, 512):
        x = basic_block(x, channels, width, 1 if width == 64 else 2)
        x = basic_block(x, width, width, 1)
        channels = width
    return keras.Model(inputs, layers.Dense(10)(layers.GlobalAveragePooling2D()(x)))


def language_model(seq, vocab, units, cell):
    return keras.Sequential([
        keras.Input((seq,), dtype="int32"),
        layers.Embedding(vocab, units),
        cell(units, return_sequences=True),
        cell(units, return_sequences=True),
        layers.Dense(vocab),
    ])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["resnet", "lstm", "gru"], default="resnet")
    p.add_argument("--steps", type=int, default=5)
    args = p.parse_args()
    rng = np.random.default_rng(1)
    if args.model == "resnet":
        model, batch = resnet18(), 64
        x = rng.standard_normal((batch, 32, 32, 3), dtype=np.float32)
        y = rng.integers(0, 10, batch).astype(np.int32)
    else:
        seq, vocab, units, batch = 64, 1000, 512, 32
        cell = layers.GRU if args.model == "gru" else layers.LSTM
        model = language_model(seq, vocab, units, cell)
        x = rng.integers(0, vocab, (batch, seq)).astype(np.int32)
        y = rng.integers(0, vocab, (batch, seq)).astype(np.int32)
    # On the logits, as bench_keras_layers (losses::sparse_categorical_crossentropy)
    # and PyTorch's F.cross_entropy: Keras's string name means from_logits=False,
    # whose normalisation and log of [32, 64, 1000] probabilities are not the
    # same model (20 ms more a recurrent step).
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.01, momentum=0.9), loss=loss)
    model.train_on_batch(x, y)
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        model.train_on_batch(x, y)
        times.append(time.perf_counter() - start)
    times.sort()
    blas = autoshard.blas_info()
    print(json.dumps({"engine": "autoshard from Python, NumPy first", "model": args.model,
                      "batch": batch, "steps": args.steps, "median_step_s": times[len(times) // 2],
                      "min_step_s": times[0], "blas_core": blas["core"],
                      "private_copy": blas["private_copy"]}))


if __name__ == "__main__":
    main()
