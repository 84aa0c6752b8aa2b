"""Keras's functional API guide, "Models with multiple inputs and outputs":
ranking customer issue tickets by priority and routing them to a
department, from the ticket's title, body and tags. Synthetic data; the
targets are given as Keras scripts give them (a (n,) float priority
against a (n, 1) output, department class ids for a softmax). Also the
guide's other pieces: keras.layers.concatenate, a shared layer, a nested
model, get_layer and a model rebuilt from its JSON."""

import numpy as np

import autoshard.keras as keras

keras.utils.set_random_seed(7)
num_tags, num_words, num_departments = 12, 100, 4

title_input = keras.Input(shape=(None,), dtype="int32", name="title")
body_input = keras.Input(shape=(None,), dtype="int32", name="body")
tags_input = keras.Input(shape=(num_tags,), name="tags")

embed = keras.layers.Embedding(num_words, 16, name="shared_embedding")  # shared by both texts
title_features = keras.layers.GlobalAveragePooling1D()(embed(title_input))
body_features = keras.layers.GlobalAveragePooling1D()(embed(body_input))

# A small nested model over the tags.
tags_in = keras.Input(shape=(num_tags,))
tag_features = keras.layers.Dense(8, activation="relu", name="tag_dense")(tags_in)
tag_encoder = keras.Model(tags_in, tag_features, name="tag_encoder")

x = keras.layers.concatenate([title_features, body_features, tag_encoder(tags_input)])
priority = keras.layers.Dense(1, name="priority")(x)
department = keras.layers.Dense(num_departments, activation="softmax", name="department")(x)
model = keras.Model(inputs=[title_input, body_input, tags_input], outputs=[priority, department])

model.compile(optimizer=keras.optimizers.RMSprop(1e-2),
              loss={"priority": "mse", "department": "sparse_categorical_crossentropy"},
              loss_weights={"priority": 1.0, "department": 0.2})

rng = np.random.default_rng(1)
n = 96
title_data = rng.integers(0, num_words, size=(n, 10))
body_data = rng.integers(0, num_words, size=(n, 50))
tags_data = rng.integers(0, 2, size=(n, num_tags)).astype("float32")
priority_targets = (tags_data[:, :3].sum(1) / 3).astype("float64")  # shape (n,), not (n, 1)
dept_targets = (tags_data[:, 3:5] @ np.array([1.0, 2.0])).astype("float32")  # float class ids

history = model.fit({"title": title_data, "body": body_data, "tags": tags_data},
                    {"priority": priority_targets, "department": dept_targets},
                    epochs=4, batch_size=32, shuffle=False, verbose=0)
for epoch, loss in enumerate(history.history["loss"]):
    print(f"epoch {epoch + 1} loss: {loss:.6f}")

print("layers:", [layer.name for layer in model.layers][:6], "...")
print("shared embedding output:", model.get_layer("shared_embedding").output)
rebuilt = keras.models.model_from_json(model.to_json())
rebuilt.set_weights(model.get_weights())
same = [np.allclose(a, b, atol=1e-6) for a, b in
        zip(rebuilt.predict([title_data, body_data, tags_data], verbose=0),
            model.predict([title_data, body_data, tags_data], verbose=0))]
print("rebuilt from JSON predicts the same:", all(same))
