#!/usr/bin/python3
"""Adam's two placements of epsilon, as reference values for autoshard.

Keras 3 (keras/src/optimizers/adam.py, update_step) adds epsilon to sqrt(v)
before the bias correction:
    m += (g - m) (1 - beta_1);  v += (g^2 - v) (1 - beta_2)
    alpha = lr sqrt(1 - beta_2^t) / (1 - beta_1^t)
    p -= m alpha / (sqrt(v) + epsilon)
TensorFlow.js (tfjs-core/src/optimizers/adam_optimizer.ts, applyGradients)
adds it after the correction:
    p += -lr (m / (1 - beta_1^t)) / (sqrt(v / (1 - beta_2^t)) + epsilon)

A Dense(2) layer on 3 features under mean squared error, trained for a few
steps on one batch with a large epsilon (0.1) so that the placement shows;
float64 throughout. Writes tests/data/keras_files/adam_epsilon.json:

    /usr/bin/python3 tools/keras_files/adam_epsilon_reference.py
"""
import json
import os

import numpy as np

LR, BETA_1, BETA_2, EPSILON, STEPS = 0.1, 0.9, 0.999, 0.1, 4


def loss_and_grads(x, y, kernel, bias):
    error = x @ kernel + bias - y
    scale = 2.0 / error.size
    return float(np.mean(error**2)), scale * x.T @ error, scale * error.sum(axis=0)


def train(x, y, kernel, bias, placement):
    params = [kernel.copy(), bias.copy()]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    losses = []
    for t in range(1, STEPS + 1):
        loss, *grads = loss_and_grads(x, y, *params)
        losses.append(loss)
        for i, g in enumerate(grads):
            m[i] += (g - m[i]) * (1 - BETA_1)
            v[i] += (g * g - v[i]) * (1 - BETA_2)
            if placement == "before":
                alpha = LR * np.sqrt(1 - BETA_2**t) / (1 - BETA_1**t)
                params[i] -= m[i] * alpha / (np.sqrt(v[i]) + EPSILON)
            else:
                m_hat = m[i] / (1 - BETA_1**t)
                v_hat = v[i] / (1 - BETA_2**t)
                params[i] += -LR * m_hat / (np.sqrt(v_hat) + EPSILON)
    return {"losses": losses, "kernel": params[0].tolist(), "bias": params[1].tolist()}


def main():
    rng = np.random.default_rng(31)
    x = rng.standard_normal((4, 3)).astype(np.float32).astype(np.float64)
    y = rng.standard_normal((4, 2)).astype(np.float32).astype(np.float64)
    kernel = (0.5 * rng.standard_normal((3, 2))).astype(np.float32).astype(np.float64)
    bias = (0.1 * rng.standard_normal(2)).astype(np.float32).astype(np.float64)
    out = {
        "optimizer": {"learning_rate": LR, "beta_1": BETA_1, "beta_2": BETA_2,
                      "epsilon": EPSILON, "steps": STEPS},
        "x": x.tolist(), "y": y.tolist(), "kernel": kernel.tolist(), "bias": bias.tolist(),
        "before": train(x, y, kernel, bias, "before"),
        "after": train(x, y, kernel, bias, "after"),
    }
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "..", "tests", "data", "keras_files", "adam_epsilon.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote", os.path.normpath(path))


if __name__ == "__main__":
    main()
