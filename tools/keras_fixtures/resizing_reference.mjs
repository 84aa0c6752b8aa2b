// Reference images for keras.layers.Resizing from TensorFlow.js's own
// resizeBilinear and resizeNearestNeighbor with half-pixel centres (what
// Keras 3's Resizing computes: tf.image.resize / jax.image.resize without
// antialiasing). Writes tests/data/keras_layers/resizing_reference.json:
// the input batch [2, 7, 6, 3] and, per target size and interpolation,
// TF.js's output.
//
//   cd tools/keras_fixtures && npm ci && node resizing_reference.mjs
import * as tf from '@tensorflow/tfjs';
import {writeFileSync} from 'node:fs';
import {dirname, join} from 'node:path';
import {fileURLToPath} from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
await tf.setBackend('cpu');
let s = 2026;
const rand = () => (s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32;
const x = tf.tensor(Float32Array.from({length: 2 * 7 * 6 * 3}, () => 4 * rand() - 2), [2, 7, 6, 3]);
const out = {input: x.arraySync(), outputs: []};
for (const [h, w] of [[10, 4], [3, 5], [7, 13]]) {
  out.outputs.push({height: h, width: w, interpolation: 'bilinear',
                    output: tf.image.resizeBilinear(x, [h, w], false, true).arraySync()});
  out.outputs.push({height: h, width: w, interpolation: 'nearest',
                    output: tf.image.resizeNearestNeighbor(x, [h, w], false, true).arraySync()});
}
writeFileSync(join(here, '../../tests/data/keras_layers/resizing_reference.json'),
              JSON.stringify(out));
console.log('wrote resizing_reference.json');
