// Models whose files hold what users' Keras 2 and TensorFlow.js write and
// Keras 3 reads differently (issue 57, "real files"): Keras 2's
// hard_sigmoid, clip(0.2 x + 0.5, 0, 1), as an activation and as the LSTM
// and GRU gates' default; a ReLU layer whose max_value is null; a Conv1D +
// LSTM model that tools/keras_files/make_family_files.py also writes as the
// .keras file Keras 2.15 saves on Windows; masks; ConvLSTM2D.
//
//   cd tools/keras_fixtures && npm ci && node file_families.mjs [OUT_DIR]
//
// OUT_DIR defaults to tests/data/keras_files/families. For each model it
// writes <name>/model.json and <name>/weights.bin (TF.js's own artifacts)
// and <name>/reference.json: the input x, the target y, TF.js's predictions
// and the mean squared error before each of 3 SGD steps (learning rate 0.1)
// on the whole batch, TF.js's trainOnBatch.
import * as tf from '@tensorflow/tfjs';
import {mkdirSync, writeFileSync} from 'node:fs';
import {dirname, join, resolve} from 'node:path';
import {fileURLToPath} from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const outDir = resolve(process.argv[2] ?? join(here, '../../tests/data/keras_files/families'));
await tf.setBackend('cpu');

// A small deterministic generator (the draws must not depend on TF.js's).
function generator(seed) {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

const MODELS = {
  // Pre-activations span [-4, 4]: both forms differ everywhere in (-3, 3).
  hard_sigmoid_dense: {
    input: [6],
    build: (x) => {
      const h = tf.layers.dense({units: 8, activation: 'hardSigmoid', name: 'hidden'}).apply(x);
      return tf.layers.dense({units: 3, name: 'out'}).apply(h);
    },
  },
  // TF.js's recurrent_activation default is hard_sigmoid (Keras 2's).
  recurrent_keras2_gates: {
    input: [5, 3],
    build: (x) => {
      let h = tf.layers.lstm({units: 4, returnSequences: true, name: 'lstm'}).apply(x);
      h = tf.layers.gru({units: 3, name: 'gru'}).apply(h);
      return tf.layers.dense({units: 2, name: 'out'}).apply(h);
    },
  },
  relu_max_value_null: {
    input: [4],
    build: (x) => {
      let h = tf.layers.dense({units: 6, name: 'hidden'}).apply(x);
      h = tf.layers.reLU({maxValue: null, name: 're_lu'}).apply(h);
      return tf.layers.dense({units: 2, name: 'out'}).apply(h);
    },
  },
  conv1d_lstm: {
    input: [8, 3],
    build: (x) => {
      let h = tf.layers.conv1d({filters: 4, kernelSize: 3, activation: 'relu', name: 'conv1d'})
                  .apply(x);
      h = tf.layers.lstm({units: 5, recurrentActivation: 'sigmoid', name: 'lstm'}).apply(h);
      return tf.layers.dense({units: 2, name: 'dense'}).apply(h);
    },
  },
  // (After the others, so that their seeds stay.)
  // Masks (issue 57): Embedding(mask_zero) ids padded with 0 at the end,
  // through an LSTM of sequences and a GRU to its last state; and Masking
  // over float steps. TF.js's losses ignore masks, so the outputs are the
  // last states (no masked steps in the loss), as Keras's losses agree.
  masked_embedding_rnn: {
    input: [6],
    dtype: 'int32',
    lengths: [6, 3, 1, 4, 2, 5],
    vocab: 10,
    build: (x) => {
      let h = tf.layers.embedding({inputDim: 10, outputDim: 4, maskZero: true, name: 'embedding'})
                  .apply(x);
      h = tf.layers.lstm({units: 5, returnSequences: true, recurrentActivation: 'sigmoid',
                          name: 'lstm'}).apply(h);
      h = tf.layers.gru({units: 3, recurrentActivation: 'sigmoid', name: 'gru'}).apply(h);
      return tf.layers.dense({units: 2, name: 'dense'}).apply(h);
    },
  },
  masking_lstm: {
    input: [5, 3],
    lengths: [5, 2, 4, 1, 3, 5],
    build: (x) => {
      let h = tf.layers.masking({maskValue: 0, name: 'masking'}).apply(x);
      h = tf.layers.lstm({units: 4, recurrentActivation: 'sigmoid', name: 'lstm'}).apply(h);
      return tf.layers.dense({units: 2, name: 'dense'}).apply(h);
    },
  },
  // ConvLSTM2D (issue 57): TF.js's gates default to Keras 2's hard_sigmoid
  // (the composed step), the second layer's to sigmoid (the fused one); a
  // 'same' layer of sequences, then a 'valid' one with a 2x3 kernel.
  conv_lstm2d: {
    input: [3, 5, 5, 2],
    build: (x) => {
      let h = tf.layers.convLstm2d({filters: 3, kernelSize: 3, padding: 'same',
                                    returnSequences: true, name: 'conv_lstm2d'}).apply(x);
      h = tf.layers.convLstm2d({filters: 2, kernelSize: [2, 3], recurrentActivation: 'sigmoid',
                                name: 'conv_lstm2d_1'}).apply(h);
      h = tf.layers.flatten({name: 'flatten'}).apply(h);
      return tf.layers.dense({units: 2, name: 'dense'}).apply(h);
    },
  },
};

const BATCH = 6;

async function save(model, dir) {
  await model.save(tf.io.withSaveHandler(async (artifacts) => {
    const data = Array.isArray(artifacts.weightData)
        ? Buffer.concat(artifacts.weightData.map((b) => Buffer.from(b)))
        : Buffer.from(artifacts.weightData);
    writeFileSync(join(dir, 'weights.bin'), data);
    const json = {
      format: 'layers-model', generatedBy: `TensorFlow.js tfjs-layers v${tf.version_layers}`,
      convertedBy: null, modelTopology: artifacts.modelTopology,
      weightsManifest: [{paths: ['weights.bin'], weights: artifacts.weightSpecs}],
    };
    writeFileSync(join(dir, 'model.json'), JSON.stringify(json));
    return {modelArtifactsInfo: {dateSaved: new Date(), modelTopologyType: 'JSON'}};
  }));
}

// Sequences of spec.lengths padded with zeros at the end: ids in [1, vocab)
// (int32), or float steps in [-4, 4] (0 pads them for Masking).
function paddedInputs(spec, rand) {
  const [steps, ...features] = spec.input;
  const width = features.reduce((a, b) => a * b, 1);
  const values = new Float32Array(BATCH * steps * width);
  spec.lengths.forEach((length, i) => {
    for (let j = 0; j < length * width; ++j)
      values[i * steps * width + j] =
          spec.vocab ? 1 + Math.floor(rand() * (spec.vocab - 1)) : 8 * rand() - 4;
  });
  return tf.tensor(values, [BATCH, ...spec.input], spec.dtype ?? 'float32');
}

async function makeFamily(name, spec, seed) {
  const rand = generator(seed);
  const x = tf.input({shape: spec.input, name: 'x', dtype: spec.dtype ?? 'float32'});
  const model = tf.model({inputs: x, outputs: spec.build(x), name});
  for (const w of model.weights) {
    const n = w.shape.reduce((a, b) => a * b, 1);
    w.write(tf.tensor(Float32Array.from({length: n}, () => 2 * rand() - 1), w.shape));
  }
  const xs = spec.lengths ? paddedInputs(spec, rand)
                         : tf.tensor(Float32Array.from(
                                         {length: BATCH * spec.input.reduce((a, b) => a * b, 1)},
                                         () => 8 * rand() - 4),
                                     [BATCH, ...spec.input]);
  const predicted = model.predict(xs);
  const ys = tf.tensor(Float32Array.from({length: predicted.size}, () => 2 * rand() - 1),
                       predicted.shape);
  const dir = join(outDir, name);
  mkdirSync(dir, {recursive: true});
  await save(model, dir);  // before training: the file holds the initial weights
  model.compile({optimizer: tf.train.sgd(0.1), loss: 'meanSquaredError'});
  const losses = [];
  for (let step = 0; step < 3; ++step) losses.push(await model.trainOnBatch(xs, ys));
  const reference = {
    x: xs.arraySync(), y: ys.arraySync(), predictions: predicted.arraySync(),
    sgd: {learning_rate: 0.1, loss: 'mean_squared_error', batch_size: BATCH, losses},
  };
  writeFileSync(join(dir, 'reference.json'), JSON.stringify(reference));
  console.log('wrote', name);
}

let seed = 57;
for (const [name, spec] of Object.entries(MODELS)) await makeFamily(name, spec, seed++);
