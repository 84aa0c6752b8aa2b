// Reference values for autoshard's Keras layers from TensorFlow.js, an
// independent implementation of Keras's layers (pure JavaScript CPU backend).
//
//   cd tools/keras_fixtures && npm ci && node make_fixtures.mjs [OUT_DIR]
//
// OUT_DIR defaults to tests/data/keras_layers. For each model of models.mjs
// it writes
//   <name>.safetensors  weights by Keras path ("conv/kernel"), inputs
//                       ("input/x"), targets ("target/<output>"), outputs
//                       ("output/<output>", inference mode), the loss in
//                       training mode ("loss"), the gradient of that loss
//                       w.r.t. every trainable weight ("grad/conv/kernel") and
//                       every float input ("grad/input/x"), the losses before
//                       each of 4 optimizer steps from the same weights
//                       ("steps/adam", "steps/sgd_momentum", "steps/rmsprop")
//                       and every weight after the Adam steps
//                       ("after_adam/conv/kernel"; moving statistics included)
//   tfjs/<name>.json, tfjs/<name>.weights.bin
//                       the TF.js model artifacts (model.json format)
// and index.json: every model's spec (layers in order with their Keras 3
// options, see models.mjs), its weights' paths and shapes, the optimizers'
// hyper-parameters and where TF.js differs from Keras 3.
import * as tf from '@tensorflow/tfjs';
import {mkdirSync, writeFileSync} from 'node:fs';
import {dirname, join, resolve} from 'node:path';
import {fileURLToPath} from 'node:url';

import * as custom from './custom_layers.mjs';
import {allModels} from './models.mjs';
import {saveSafetensors} from './safetensors.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const outDir = resolve(process.argv[2] ?? join(here, '../../tests/data/keras_layers'));
await tf.setBackend('cpu');

const STEPS = 4;
const OPTIMIZERS = {
  adam: {class_name: 'Adam', learning_rate: 0.01, beta_1: 0.9, beta_2: 0.999, epsilon: 1e-7,
         make: () => tf.train.adam(0.01, 0.9, 0.999, 1e-7)},
  sgd_momentum: {class_name: 'SGD', learning_rate: 0.05, momentum: 0.9, nesterov: false,
                 make: () => tf.train.momentum(0.05, 0.9, false)},
  rmsprop: {class_name: 'RMSprop', learning_rate: 0.01, rho: 0.9, momentum: 0, epsilon: 1e-7,
            centered: false, make: () => tf.train.rmsprop(0.01, 0.9, 0, 1e-7, false)},
};

const DIFFERENCES = [
  'TF.js LSTM/GRU default recurrent_activation is hard_sigmoid (Keras 2); the fixtures set ' +
      "'sigmoid', Keras 3's default.",
  "TF.js's hardSigmoid is Keras 2's clip(0.2 x + 0.5, 0, 1); Keras 3's hard_sigmoid is " +
      'relu6(x + 3) / 6, computed here by the custom layer KerasHardSigmoid after a linear Dense.',
  'TF.js GRU supports only reset_after=False; reset_after=True (Keras 3 default) is the custom ' +
      'layer GRUResetAfter (weights kernel, recurrent_kernel, bias [2, 3 units]; gates z, r, h).',
  'TF.js has no GroupNormalization, no Subtract and no Conv2D groups, and no gradient through ' +
      'dilated convolutions: custom layers GroupNormalization, Subtract and KerasConv (the ' +
      'kernel spread with zeros) compute them from Keras 3 formulas.',
  "TF.js DepthwiseConv2D names its kernel 'depthwise_kernel' (Keras 2); Keras 3 names it " +
      "'kernel': the safetensors use Keras 3's 'depthwise/kernel', model.json keeps TF.js's name.",
  "Keras 3's silu and swish are one function; gelu_tanh is keras.activations.gelu(x, " +
      "approximate=True) (TF.js 'gelu_new'); gelu is the exact (erf) form.",
  "TF.js Adam divides by sqrt(v_hat) + epsilon (as PyTorch); Keras 3 folds the bias " +
      'corrections into the learning rate, i.e. divides by sqrt(v_hat) + epsilon / ' +
      'sqrt(1 - beta_2^t): with epsilon 1e-7 the losses differ far below the tolerance.',
  'Losses follow Keras 3: mean over the batch (sum_over_batch_size); probabilities clipped to ' +
      '[1e-7, 1 - 1e-7]; categorical label_smoothing y (1 - s) + s / classes, binary ' +
      'y (1 - s) + s / 2; several outputs sum loss_weight * loss.',
  "TF.js's AveragePooling with padding 'same' and UpSampling2D give the right outputs but " +
      'wrong input gradients (tf.avgPool same, tf.image.resizeNearestNeighbor): the custom ' +
      'layers KerasAveragePooling and KerasUpSampling2D compute them from ops whose ' +
      'gradients are right (checked against hand-written sums).',
  'TF.js BatchNormalization fails in training with center=false or scale=false (it reads the ' +
      'missing beta or gamma), so the fixtures keep both.',
  'LSTM bias is drawn at random like every other weight (unit_forget_bias only sets the ' +
      'initial value, which the fixtures replace).',
  "TF.js's MaxPooling3D gives the right outputs but an input gradient that loses part of " +
      "dy (its sum is not the sum of dy) unless its windows tile the input (volume_cnn's " +
      "2x2x2 over 6x6x6): the other cases, 'same' and overlapping windows, are checked " +
      'against NumPy in python/tests/test_volume_layers.py.',
];

// mulberry32: a small seeded generator, so the fixtures are the same on every run.
function generator(seedText) {
  let a = 0;
  for (const ch of seedText) a = (Math.imul(a ^ ch.charCodeAt(0), 2654435761) + 1) >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const camel = (s) => s.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
const TFJS_ACTIVATION = {log_softmax: 'logSoftmax', gelu_tanh: 'gelu_new', silu: 'swish'};

// TF.js arguments from Keras 3 options (snake_case to camelCase, with the
// few names that differ).
function tfjsArgs(spec) {
  const args = {name: spec.name};
  for (const [key, value] of Object.entries(spec.config)) {
    if (key === 'layer' || key === 'groups' || key === 'reset_after') continue;
    if (key === 'activation') args.activation = TFJS_ACTIVATION[value] ?? value;
    else if (key === 'negative_slope') args.alpha = value;
    else if (key === 'target_shape') args.targetShape = value;
    else args[camel(key)] = value;
  }
  return args;
}

function makeLayer(spec) {
  const c = spec.config, args = tfjsArgs(spec);
  switch (spec.class_name) {
    case 'Dense': return tf.layers.dense(args);
    case 'Conv1D':
    case 'Conv2D': {
      const rank = spec.class_name === 'Conv1D' ? 1 : 2;
      if (c.groups > 1 || c.dilation_rate.some((d) => d > 1)) {
        return new custom.KerasConv({...args, rank, groups: c.groups});
      }
      return rank === 1 ? tf.layers.conv1d(args) : tf.layers.conv2d(args);
    }
    case 'Conv3D': return tf.layers.conv3d(args);
    case 'MaxPooling3D':
      if (c.padding === 'same' || c.strides.some((s, i) => s < c.pool_size[i])) {
        throw new Error(`${spec.name}: TF.js's gradient is wrong for overlapping windows`);
      }
      return tf.layers.maxPooling3d(args);
    case 'AveragePooling3D':
      if (c.padding === 'same') throw new Error(`${spec.name}: TF.js's 'same' average differs`);
      return tf.layers.averagePooling3d(args);
    case 'DepthwiseConv2D': return tf.layers.depthwiseConv2d(args);
    case 'SeparableConv2D': return tf.layers.separableConv2d(args);
    case 'Conv2DTranspose': return tf.layers.conv2dTranspose(args);
    case 'MaxPooling1D': return tf.layers.maxPooling1d(args);
    case 'AveragePooling1D':
      if (c.padding === 'same') return new custom.KerasAveragePooling({...args, rank: 1});
      return tf.layers.averagePooling1d(args);
    case 'MaxPooling2D': return tf.layers.maxPooling2d(args);
    case 'AveragePooling2D':
      if (c.padding === 'same') return new custom.KerasAveragePooling({...args, rank: 2});
      return tf.layers.averagePooling2d(args);
    case 'GlobalAveragePooling1D': return tf.layers.globalAveragePooling1d(args);
    case 'GlobalMaxPooling1D': return tf.layers.globalMaxPooling1d(args);
    case 'GlobalAveragePooling2D': return tf.layers.globalAveragePooling2d(args);
    case 'GlobalMaxPooling2D': return tf.layers.globalMaxPooling2d(args);
    case 'BatchNormalization': return tf.layers.batchNormalization(args);
    case 'GroupNormalization': return new custom.GroupNormalization({...args, groups: c.groups});
    case 'LSTM': return tf.layers.lstm(args);
    case 'GRU': return c.reset_after ? new custom.GRUResetAfter(args) : tf.layers.gru(args);
    case 'SimpleRNN': return tf.layers.simpleRNN(args);
    case 'Bidirectional': return tf.layers.bidirectional({...args, layer: makeLayer(c.layer)});
    case 'Flatten': return tf.layers.flatten(args);
    case 'Reshape': return tf.layers.reshape(args);
    case 'Permute': return tf.layers.permute(args);
    case 'RepeatVector': return tf.layers.repeatVector(args);
    case 'Concatenate': return tf.layers.concatenate(args);
    case 'Add': return tf.layers.add(args);
    case 'Subtract': return new custom.Subtract(args);
    case 'Multiply': return tf.layers.multiply(args);
    case 'Average': return tf.layers.average(args);
    case 'Maximum': return tf.layers.maximum(args);
    case 'ZeroPadding2D': return tf.layers.zeroPadding2d(args);
    case 'UpSampling2D': return new custom.KerasUpSampling2D(args);
    case 'Cropping2D': return tf.layers.cropping2D(args);
    case 'Rescaling': return tf.layers.rescaling(args);
    case 'Activation': return tf.layers.activation(args);
    case 'LeakyReLU': return tf.layers.leakyReLU(args);
    case 'Embedding': return tf.layers.embedding(args);
    default: throw new Error(`${spec.name}: no TF.js layer for ${spec.class_name}`);
  }
}

// The TF.js model of a spec. A Dense with Keras 3's hard_sigmoid is a linear
// Dense followed by KerasHardSigmoid.
function buildModel(spec) {
  const tensors = {};
  const inputs = spec.inputs.map((i) => (tensors[i.name] = tf.input({
    shape: i.shape, name: i.name, dtype: i.dtype})));
  const layers = {};
  for (const l of spec.layers) {
    const hard = l.config.activation === 'hard_sigmoid';
    const made = makeLayer(hard ? {...l, config: {...l.config, activation: 'linear'}} : l);
    layers[l.name] = hard ? [made, new custom.KerasHardSigmoid({name: `${l.name}_hard_sigmoid`})]
                          : [made];
  }
  const nodes = spec.nodes ?? spec.layers.map((l, k) => ({
    layer: l.name, inbound: [k === 0 ? spec.inputs[0].name : spec.layers[k - 1].name]}));
  const lookup = (id) => {
    const [name, index] = id.split(':');
    const t = tensors[name];
    return index === undefined ? t : t[Number(index)];
  };
  for (const n of nodes) {
    const ins = n.inbound.map(lookup);
    let out = ins.length === 1 ? ins[0] : ins;
    for (const l of layers[n.layer]) out = l.apply(out);
    tensors[n.id ?? n.layer] = out;
  }
  return tf.model({inputs, outputs: spec.outputs.map(lookup), name: spec.name});
}

// Keras 3 weight path of a TF.js weight.
function kerasPath(weight, model) {
  const path = weight.originalName;
  const [layerName] = path.split('/');
  const l = model.getLayer(layerName);
  if (l.getClassName() === 'DepthwiseConv2D') return path.replace('depthwise_kernel', 'kernel');
  return path;
}

function randomWeight(rand, path, shape) {
  const size = shape.reduce((a, b) => a * b, 1);
  const data = new Float32Array(size);
  const name = path.split('/').pop();
  const fanIn = shape.length > 1 ? shape.slice(0, -1).reduce((a, b) => a * b, 1) : 1;
  for (let i = 0; i < size; ++i) {
    const u = rand();
    if (name === 'gamma' || name === 'moving_variance') data[i] = 0.5 + u;
    else if (name === 'embeddings') data[i] = 2 * u - 1;
    else if (shape.length === 1 || name === 'bias') data[i] = 0.6 * u - 0.3;
    else data[i] = (2 * u - 1) * Math.sqrt(3 / fanIn);
  }
  return tf.tensor(data, shape);
}

function randomInput(rand, spec, batch) {
  const shape = [batch, ...spec.shape];
  const size = shape.reduce((a, b) => a * b, 1);
  if (spec.dtype === 'int32') {
    return tf.tensor(Int32Array.from({length: size}, () => Math.floor(rand() * spec.vocab)),
                     shape, 'int32');
  }
  return tf.tensor(Float32Array.from({length: size}, () => 2 * rand() - 1), shape);
}

function randomTarget(rand, loss, outputShape) {
  const size = outputShape.reduce((a, b) => a * b, 1);
  const classes = outputShape[outputShape.length - 1];
  if (loss.name === 'sparse_categorical_crossentropy') {
    const ids = Int32Array.from({length: size / classes}, () => Math.floor(rand() * classes));
    return tf.tensor(ids, outputShape.slice(0, -1), 'int32');
  }
  if (loss.name === 'categorical_crossentropy') {
    const data = new Float32Array(size);
    for (let i = 0; i < size / classes; ++i) data[i * classes + Math.floor(rand() * classes)] = 1;
    return tf.tensor(data, outputShape);
  }
  if (loss.name === 'binary_crossentropy') {
    return tf.tensor(Float32Array.from({length: size}, () => (rand() < 0.5 ? 0 : 1)), outputShape);
  }
  return tf.tensor(Float32Array.from({length: size}, () => 2 * rand() - 1), outputShape);
}

const EPSILON = 1e-7;

// Keras 3's losses, each reduced to its mean over the batch.
function kerasLoss(loss, yTrue, yPred) {
  switch (loss.name) {
    case 'mean_squared_error': return tf.mean(tf.square(tf.sub(yPred, yTrue)));
    case 'mean_absolute_error': return tf.mean(tf.abs(tf.sub(yPred, yTrue)));
    case 'huber': {
      // 0.5 e^2 where |e| <= delta, else delta (|e| - delta / 2): written
      // with a minimum, since TF.js has no gradient through tf.where's test.
      const e = tf.abs(tf.sub(yPred, yTrue)), d = loss.delta;
      const quadratic = tf.minimum(e, d);
      return tf.mean(tf.add(tf.mul(0.5, tf.square(quadratic)), tf.mul(d, tf.sub(e, quadratic))));
    }
    case 'sparse_categorical_crossentropy':
    case 'categorical_crossentropy': {
      const classes = yPred.shape[yPred.shape.length - 1];
      let y = loss.name === 'categorical_crossentropy' ? yTrue
                                                        : tf.oneHot(yTrue, classes).toFloat();
      const s = loss.label_smoothing ?? 0;
      if (s) y = tf.add(tf.mul(y, 1 - s), s / classes);
      const logp = loss.from_logits
          ? tf.logSoftmax(yPred)
          : tf.log(tf.clipByValue(tf.div(yPred, tf.sum(yPred, -1, true)), EPSILON, 1 - EPSILON));
      return tf.mean(tf.neg(tf.sum(tf.mul(y, logp), -1)));
    }
    case 'binary_crossentropy': {
      const s = loss.label_smoothing ?? 0;
      const y = s ? tf.add(tf.mul(yTrue, 1 - s), 0.5 * s) : yTrue;
      if (loss.from_logits) {
        return tf.mean(tf.add(tf.sub(tf.relu(yPred), tf.mul(yPred, y)),
                              tf.log1p(tf.exp(tf.neg(tf.abs(yPred))))));
      }
      const p = tf.clipByValue(yPred, EPSILON, 1 - EPSILON);
      return tf.mean(tf.neg(tf.add(tf.mul(y, tf.log(tf.add(p, EPSILON))),
                                   tf.mul(tf.sub(1, y), tf.log(tf.add(tf.sub(1, p), EPSILON))))));
    }
    default: throw new Error(`no loss ${loss.name}`);
  }
}

function totalLoss(spec, model, inputs, targets) {
  let outs = model.apply(inputs.length === 1 ? inputs[0] : inputs, {training: true});
  if (!Array.isArray(outs)) outs = [outs];
  let total = tf.scalar(0);
  spec.losses.forEach((loss, k) => {
    total = tf.add(total, tf.mul(spec.loss_weights[k], kerasLoss(loss, targets[k], outs[k])));
  });
  return total;
}

const f32 = (t) => ({dtype: 'F32', shape: t.shape, data: Float32Array.from(t.dataSync())});
const tensorEntry = (t) => t.dtype === 'int32'
    ? {dtype: 'I32', shape: t.shape, data: Int32Array.from(t.dataSync())}
    : f32(t);

async function saveArtifacts(model, name) {
  await model.save(tf.io.withSaveHandler(async (artifacts) => {
    const data = Array.isArray(artifacts.weightData)
        ? Buffer.concat(artifacts.weightData.map((b) => Buffer.from(b)))
        : Buffer.from(artifacts.weightData);
    writeFileSync(join(outDir, 'tfjs', `${name}.weights.bin`), data);
    const json = {
      format: 'layers-model', generatedBy: `TensorFlow.js tfjs-layers v${tf.version_layers}`,
      convertedBy: null, modelTopology: artifacts.modelTopology,
      weightsManifest: [{paths: [`${name}.weights.bin`], weights: artifacts.weightSpecs}],
    };
    writeFileSync(join(outDir, 'tfjs', `${name}.json`), JSON.stringify(json));
    return {modelArtifactsInfo: {dateSaved: new Date(), modelTopologyType: 'JSON'}};
  }));
}

async function makeFixture(spec) {
  const rand = generator(spec.name);
  const model = buildModel(spec);
  const weights = model.weights.map((w) => ({w, path: kerasPath(w, model)}));
  const initial = weights.map(({w, path}) => randomWeight(rand, path, w.shape));
  const restore = () => weights.forEach(({w}, k) => w.write(initial[k]));
  restore();
  const inputs = spec.inputs.map((i) => randomInput(rand, i, spec.batch));
  let predicted = model.predict(inputs.length === 1 ? inputs[0] : inputs);
  if (!Array.isArray(predicted)) predicted = [predicted];
  const targets = spec.losses.map((loss, k) => randomTarget(rand, loss, predicted[k].shape));

  const entries = [];
  weights.forEach(({path}, k) => entries.push([path, f32(initial[k])]));
  spec.inputs.forEach((i, k) => entries.push([`input/${i.name}`, tensorEntry(inputs[k])]));
  spec.outputs.forEach((o, k) => entries.push([`target/${o}`, tensorEntry(targets[k])]));
  spec.outputs.forEach((o, k) => entries.push([`output/${o}`, f32(predicted[k])]));

  // The loss and its gradients in training mode; float inputs become
  // variables so that their gradients come out too.
  const trainable = weights.filter(({w}) => w.trainable);
  const inputVars = inputs.map((t) => (t.dtype === 'float32' ? tf.variable(t) : null));
  const feed = inputs.map((t, k) => inputVars[k] ?? t);
  const varList = [...trainable.map(({w}) => w.read()), ...inputVars.filter((v) => v)];
  const {value, grads} = tf.variableGrads(() => totalLoss(spec, model, feed, targets), varList);
  entries.push(['loss', {dtype: 'F32', shape: [], data: Float32Array.of(value.dataSync()[0])}]);
  for (const {w, path} of trainable) entries.push([`grad/${path}`, f32(grads[w.read().name])]);
  spec.inputs.forEach((i, k) => {
    if (inputVars[k]) entries.push([`grad/input/${i.name}`, f32(grads[inputVars[k].name])]);
  });

  const steps = {};
  if (trainable.length) {
    for (const [name, opt] of Object.entries(OPTIMIZERS)) {
      restore();
      const optimizer = opt.make();
      const losses = new Float32Array(STEPS);
      for (let s = 0; s < STEPS; ++s) {
        const cost = optimizer.minimize(() => totalLoss(spec, model, inputs, targets), true,
                                        trainable.map(({w}) => w.read()));
        losses[s] = cost.dataSync()[0];
      }
      entries.push([`steps/${name}`, {dtype: 'F32', shape: [STEPS], data: losses}]);
      if (name === 'adam') {
        for (const {w, path} of weights) entries.push([`after_adam/${path}`, f32(w.read())]);
      }
      steps[name] = Array.from(losses);
    }
  }
  restore();
  saveSafetensors(join(outDir, `${spec.name}.safetensors`), entries,
                  {generator: 'tools/keras_fixtures/make_fixtures.mjs', model: spec.name});
  await saveArtifacts(model, spec.name);
  console.log(`${spec.name}: loss ${value.dataSync()[0].toFixed(6)}` +
              (steps.adam ? `, Adam ${steps.adam[0].toFixed(4)} -> ${steps.adam[STEPS - 1].toFixed(4)}`
                          : ', no trainable weights'));
  return {
    ...spec,
    weights: weights.map(({w, path}) => ({path, shape: w.shape, trainable: w.trainable})),
    file: `${spec.name}.safetensors`,
    tfjs: `tfjs/${spec.name}.json`,
  };
}

mkdirSync(join(outDir, 'tfjs'), {recursive: true});
const index = {
  generator: 'tools/keras_fixtures/make_fixtures.mjs',
  tfjs_version: tf.version.tfjs,
  backend: tf.getBackend(),
  steps: STEPS,
  optimizers: Object.fromEntries(Object.entries(OPTIMIZERS).map(([name, {make, ...rest}]) => [
    name, rest])),
  tolerances: {output: 1e-5, gradient: 1e-4, loss: 1e-4,
               note: 'relative to the largest magnitude of the expected tensor'},
  differences_from_keras3: DIFFERENCES,
  models: [],
};
for (const spec of allModels()) index.models.push(await makeFixture(spec));
writeFileSync(join(outDir, 'index.json'), JSON.stringify(index, null, 1) + '\n');
console.log(`wrote ${index.models.length} models to ${outDir}`);
