"""Sequence to sequence with LSTM states, after Keras's lstm_seq2seq example
(keras-io/examples/nlp/lstm_seq2seq.py), on autoshard.

An encoder LSTM reads a sequence and returns its final states
(return_state=True); a decoder LSTM starts from them (initial_state=) and,
trained with teacher forcing, learns to emit the sequence reversed. Then
the same layers make the two inference models of Keras's example (the
encoder alone; the decoder one step at a time from given states) and decode
greedily. The data is synthetic: digits 1..DIGITS, start token 0.

    python examples/keras_seq2seq.py        (AUTOSHARD_EXAMPLE_EPOCHS=... for fewer)

Only the import differs from Keras: `import keras` runs it on Keras.
"""

import os

import numpy as np

import autoshard.keras as keras

DIGITS, LENGTH, LATENT = 6, 5, 64
TOKENS = DIGITS + 1  # the start token 0 and the digits
EPOCHS = int(os.environ.get("AUTOSHARD_EXAMPLE_EPOCHS", "30"))


def one_hot(ids):
    return np.eye(TOKENS, dtype=np.float32)[ids]


def make_data(n, seed):
    rng = np.random.default_rng(seed)
    source = rng.integers(1, TOKENS, size=(n, LENGTH))
    target = source[:, ::-1]
    # Teacher forcing: the decoder reads the target shifted right by the start token.
    decoder_in = np.concatenate([np.zeros((n, 1), np.int64), target[:, :-1]], axis=1)
    return one_hot(source), one_hot(decoder_in), one_hot(target), target


keras.utils.set_random_seed(0)
encoder_inputs = keras.Input(shape=(None, TOKENS))
encoder = keras.layers.LSTM(LATENT, return_state=True, name="encoder")
_, state_h, state_c = encoder(encoder_inputs)
encoder_states = [state_h, state_c]

decoder_inputs = keras.Input(shape=(None, TOKENS))
decoder_lstm = keras.layers.LSTM(LATENT, return_sequences=True, return_state=True,
                                 name="decoder")
decoder_outputs, _, _ = decoder_lstm(decoder_inputs, initial_state=encoder_states)
decoder_dense = keras.layers.Dense(TOKENS, activation="softmax", name="next_token")
decoder_outputs = decoder_dense(decoder_outputs)

model = keras.Model([encoder_inputs, decoder_inputs], decoder_outputs)
model.compile(keras.optimizers.Adam(learning_rate=0.01), "categorical_crossentropy",
              metrics=["accuracy"])

x_enc, x_dec, y, target = make_data(512, seed=1)
history = model.fit([x_enc, x_dec], y, batch_size=64, epochs=EPOCHS, verbose=0)
print(f"trained: loss {history.history['loss'][0]:.4f} -> {history.history['loss'][-1]:.4f}")

# Inference, as Keras's example builds it: the encoder's states, then the
# decoder one step at a time from the states it returns.
encoder_model = keras.Model(encoder_inputs, encoder_states)
state_inputs = [keras.Input(shape=(LATENT,)), keras.Input(shape=(LATENT,))]
step_outputs, h, c = decoder_lstm(decoder_inputs, initial_state=state_inputs)
decoder_model = keras.Model([decoder_inputs] + state_inputs,
                            [decoder_dense(step_outputs), h, c])


def decode(source):
    states = encoder_model.predict(source, verbose=0)
    token = one_hot(np.zeros((len(source), 1), np.int64))
    out = []
    for _ in range(LENGTH):
        probs, h, c = decoder_model.predict([token] + list(states), verbose=0)
        ids = probs[:, -1].argmax(axis=-1)
        out.append(ids)
        token, states = one_hot(ids[:, None]), [h, c]
    return np.stack(out, axis=1)


x_test, _, _, expected = make_data(64, seed=2)
decoded = decode(x_test)
print(f"decoded reversed sequences exactly: {np.mean(np.all(decoded == expected, axis=1)):.2f}")
print(f"decoded digits right: {np.mean(decoded == expected):.2f}")
