"""Next-frame video prediction with convolutional LSTMs, after Keras's
example (keras-io/examples/vision/conv_lstm.py), on autoshard.

Three ConvLSTM2D layers with BatchNormalization between them read a clip of
frames (its length left open: Input(shape=(None, rows, cols, 1))) and a
Conv3D turns their sequence into the next frame at every step; trained with
binary cross-entropy to predict frame t + 1 from frames up to t. Keras's
example reads Moving MNIST (a download); this one makes its own clips of a
bright square moving in a straight line and bouncing off the edges, so it
runs anywhere. Then it predicts a few frames past the end of a clip, one at
a time, feeding each prediction back in, as the example does.

The model is trained on a mesh of devices that AutoShard plans (the
MESH environment variable, default data=2,model=2); the same script runs
on Keras with only the import changed (and no distribution).

    python examples/keras_next_frame.py     (AUTOSHARD_EXAMPLE_EPOCHS=... for fewer)
"""

import os

import numpy as np

import autoshard.keras as keras
from autoshard.keras import layers

FRAMES, SIZE, CLIPS = 8, 16, 64
EPOCHS = int(os.environ.get("AUTOSHARD_EXAMPLE_EPOCHS", "8"))
FILTERS = int(os.environ.get("AUTOSHARD_EXAMPLE_FILTERS", "16"))
MESH = os.environ.get("MESH", "data=2,model=2")


def moving_squares(n, seed):
    """n clips [FRAMES, SIZE, SIZE, 1] of a 3x3 square bouncing around."""
    rng = np.random.default_rng(seed)
    clips = np.zeros((n, FRAMES, SIZE, SIZE, 1), np.float32)
    for i in range(n):
        pos = rng.integers(0, SIZE - 3, size=2).astype(float)
        vel = rng.choice([-2, -1, 1, 2], size=2).astype(float)
        for t in range(FRAMES):
            r, c = int(pos[0]), int(pos[1])
            clips[i, t, r:r + 3, c:c + 3, 0] = 1.0
            pos += vel
            for k in range(2):  # bounce off the walls
                if pos[k] < 0 or pos[k] > SIZE - 3:
                    vel[k] = -vel[k]
                    pos[k] = min(max(pos[k], 0), SIZE - 3)
    return clips


def shifted(clips):
    """Frames 0..T-2 as inputs, frames 1..T-1 as the targets (the example's
    create_shifted_frames)."""
    return clips[:, :-1], clips[:, 1:]


def build():
    inp = layers.Input(shape=(None, SIZE, SIZE, 1))
    x = layers.ConvLSTM2D(FILTERS, (5, 5), padding="same", return_sequences=True,
                          activation="relu")(inp)
    x = layers.BatchNormalization()(x)
    x = layers.ConvLSTM2D(FILTERS, (3, 3), padding="same", return_sequences=True,
                          activation="relu")(x)
    x = layers.BatchNormalization()(x)
    x = layers.ConvLSTM2D(FILTERS, (1, 1), padding="same", return_sequences=True,
                          activation="relu")(x)
    x = layers.Conv3D(1, (3, 3, 3), activation="sigmoid", padding="same")(x)
    model = keras.models.Model(inp, x)
    model.compile(loss=keras.losses.binary_crossentropy, optimizer=keras.optimizers.Adam())
    return model


def main():
    keras.utils.set_random_seed(0)
    x_train, y_train = shifted(moving_squares(CLIPS, 1))
    x_val, y_val = shifted(moving_squares(CLIPS // 4, 2))
    sizes = dict(a.split("=") for a in MESH.split(","))
    mesh = keras.distribution.DeviceMesh(tuple(int(v) for v in sizes.values()), tuple(sizes))
    distribution = keras.distribution.AutoShard(
        mesh, batch_dim_name="data" if "data" in sizes else None)
    with distribution.scope():
        model = build()
    history = model.fit(x_train, y_train, batch_size=8, epochs=EPOCHS,
                        validation_data=(x_val, y_val), shuffle=False, verbose=0)
    for epoch, (loss, val) in enumerate(zip(history.history["loss"],
                                            history.history["val_loss"])):
        print(f"epoch {epoch}: loss {loss:.4f} val_loss {val:.4f}")
    print(f"trained on mesh {MESH}")

    # Predict past the end of a clip, feeding each new frame back in.
    clip = moving_squares(1, 3)[0]
    frames = clip[:FRAMES // 2]
    for _ in range(FRAMES - FRAMES // 2):
        new = model.predict(frames[None], verbose=0)[0, -1]
        frames = np.concatenate([frames, new[None]], axis=0)
    truth = clip[FRAMES // 2:]
    guess = frames[FRAMES // 2:]
    print(f"next frame: mean abs error {np.abs(guess[0] - truth[0]).mean():.4f} "
          f"(all-dark frame: {np.abs(truth[0]).mean():.4f})")


if __name__ == "__main__":
    main()
