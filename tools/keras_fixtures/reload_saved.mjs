// Reloads a TensorFlow.js directory that `autoshard train --save` wrote
// (model.json + shards) in TensorFlow.js itself, predicts on X.npy and
// compares with autoshard's predictions Y.npy (from `autoshard predict`):
//
//   node reload_saved.mjs SAVED_DIR X.npy Y.npy
//
// Prints the largest difference relative to the largest magnitude; exits 1
// above 1e-5. Only for the round trip recorded in docs/keras-files.md; the
// C++ tests never need Node.
import fs from 'node:fs';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs';

// A little-endian float32 or int32 .npy in C order.
function readNpy(file) {
  const buf = fs.readFileSync(file);
  const headerLen = buf.readUInt16LE(8);
  const header = buf.toString('latin1', 10, 10 + headerLen);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(',').filter((s) => s.trim()).map(Number);
  const data = buf.subarray(10 + headerLen);
  const bytes = new Uint8Array(data).buffer;
  if (descr === '<f4') return tf.tensor(new Float32Array(bytes), shape, 'float32');
  if (descr === '<i4') return tf.tensor(new Int32Array(bytes), shape, 'int32');
  throw new Error(`${file}: dtype ${descr} is not read here`);
}

// The saved directory as TF.js's model artifacts (no file:// handler in
// pure-JS TF.js).
function savedModel(dir) {
  const doc = JSON.parse(fs.readFileSync(path.join(dir, 'model.json'), 'utf8'));
  const specs = [];
  const parts = [];
  for (const group of doc.weightsManifest) {
    specs.push(...group.weights);
    for (const p of group.paths) parts.push(fs.readFileSync(path.join(dir, p)));
  }
  const all = Buffer.concat(parts);
  const weightData = all.buffer.slice(all.byteOffset, all.byteOffset + all.byteLength);
  return tf.io.fromMemory({modelTopology: doc.modelTopology, weightSpecs: specs, weightData,
                           trainingConfig: doc.trainingConfig});
}

const [dir, xFile, yFile] = process.argv.slice(2);
const model = await tf.loadLayersModel(savedModel(dir));
const got = model.predict(readNpy(xFile));
const want = readNpy(yFile);
const scale = want.abs().max().dataSync()[0];
const diff = got.sub(want.reshape(got.shape)).abs().max().dataSync()[0];
const rel = diff / Math.max(scale, 1e-30);
console.log(`${dir}: TensorFlow.js reloaded autoshard's save; max |tfjs - autoshard| = ${diff.toExponential(3)}, relative ${rel.toExponential(3)} over ${want.size} values`);
process.exit(rel <= 1e-5 ? 0 : 1);
