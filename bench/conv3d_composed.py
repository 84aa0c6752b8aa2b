#!/usr/bin/python3
"""Conv3D composed of Conv2Ds (docs/layers.md, "3-D layers"): its time
against its baseline, one Conv2D doing the same multiply-adds (kernel
kh x kw over kd * C input channels, the depth slices as batch rows), and
MaxPooling3D against MaxPooling2D over the same elements; one device,
the fastest of 5 runs after a warm-up.

    PYTHONPATH=python /usr/bin/python3 bench/conv3d_composed.py
"""
import time

import numpy as np

import autoshard.keras as keras


def fastest_ms(model, x, y, reps=5):
    model.compile(keras.optimizers.SGD(0.01), "mse")
    model.predict(x, batch_size=len(x), verbose=0)
    model.train_on_batch(x, y)
    times = {"predict": [], "train step": []}
    for _ in range(reps):
        t0 = time.perf_counter()
        model.predict(x, batch_size=len(x), verbose=0)
        times["predict"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        model.train_on_batch(x, y)
        times["train step"].append(time.perf_counter() - t0)
    return {k: round(min(v) * 1e3, 1) for k, v in times.items()}


def main():
    B, D, H, W, C, F, K = 4, 16, 32, 32, 16, 32, 3
    rng = np.random.default_rng(0)
    f32 = lambda *s: rng.normal(size=s).astype("float32")  # noqa: E731
    conv3d = keras.Sequential([keras.Input((D, H, W, C)),
                               keras.layers.Conv3D(F, K, padding="same")])
    conv2d = keras.Sequential([keras.Input((H, W, C * K)),
                               keras.layers.Conv2D(F, K, padding="same")])
    pool3d = keras.Sequential([keras.Input((D, H, W, C)), keras.layers.MaxPooling3D(2)])
    pool2d = keras.Sequential([keras.Input((H, W, C)), keras.layers.MaxPooling2D(2)])
    rows = [
        (f"Conv3D [{B},{D},{H},{W},{C}] -> {F}, 3x3x3 same", conv3d, f32(B, D, H, W, C),
         f32(B, D, H, W, F)),
        (f"Conv2D [{B * D},{H},{W},{C * K}] -> {F}, 3x3 same (same MACs)", conv2d,
         f32(B * D, H, W, C * K), f32(B * D, H, W, F)),
        ("MaxPooling3D 2x2x2", pool3d, f32(B, D, H, W, C), f32(B, D // 2, H // 2, W // 2, C)),
        ("MaxPooling2D 2x2 over the same elements", pool2d, f32(B * D, H, W, C),
         f32(B * D, H // 2, W // 2, C)),
    ]
    for name, model, x, y in rows:
        print(f"{name}: {fastest_ms(model, x, y)}")


if __name__ == "__main__":
    main()
