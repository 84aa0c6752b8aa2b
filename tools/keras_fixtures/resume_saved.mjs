// Resumes training in TensorFlow.js from a directory that `autoshard train
// --save` wrote (weights, trainingConfig and the optimizer's state) and
// compares with autoshard's own resume of the same steps:
//
//   autoshard train --model M --x X.npy --y Y.npy --batch B --sampling sequential \
//       --steps N --save SAVED
//   autoshard train --model SAVED --x X.npy --y Y.npy --batch B --sampling sequential \
//       --steps K --save RESUMED
//   node resume_saved.mjs SAVED RESUMED X.npy Y.npy B K
//
// TF.js loads SAVED (its optimizer takes the "group": "optimizer" weights),
// fits K batches of B rows in order, and prints each weight's largest
// difference from RESUMED relative to its largest magnitude; exits 1 above
// 1e-4. Only for the check recorded in docs/keras-files.md; the C++ tests
// never need Node.
import fs from 'node:fs';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs';

// A little-endian float32 .npy in C order.
function readNpy(file) {
  const buf = fs.readFileSync(file);
  const headerLen = buf.readUInt16LE(8);
  const header = buf.toString('latin1', 10, 10 + headerLen);
  if (!/'descr':\s*'<f4'/.test(header)) throw new Error(`${file}: not float32`);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(',')
      .filter((s) => s.trim()).map(Number);
  const start = buf.byteOffset + 10 + headerLen;
  return tf.tensor(new Float32Array(buf.buffer.slice(start, buf.byteOffset + buf.length)), shape);
}

// A model.json directory with one weights group, its optimizer's included.
async function load(dir) {
  const json = JSON.parse(fs.readFileSync(path.join(dir, 'model.json')));
  const group = json.weightsManifest[0];
  const bin = fs.readFileSync(path.join(dir, group.paths[0]));
  return tf.loadLayersModel(tf.io.fromMemory({
    modelTopology: json.modelTopology,
    weightSpecs: group.weights,
    weightData: bin.buffer.slice(bin.byteOffset, bin.byteOffset + bin.length),
    trainingConfig: json.trainingConfig,
  }));
}

const [saved, resumed, xFile, yFile, batchArg, stepsArg] = process.argv.slice(2);
const batch = Number(batchArg), steps = Number(stepsArg);
const model = await load(saved);
console.log(`${saved}: TF.js's optimizer resumes at iteration ${model.optimizer.iterations}`);
const rows = batch * steps;
const x = readNpy(xFile), y = readNpy(yFile);
await model.fit(x.slice(0, rows), y.slice(0, rows),
                {batchSize: batch, epochs: 1, shuffle: false, verbose: 0});
const theirs = await load(resumed);
let worst = 0;
for (let i = 0; i < model.weights.length; ++i) {
  const a = model.weights[i].read(), b = theirs.weights[i].read();
  const scale = Math.max(1e-30, tf.max(tf.abs(b)).dataSync()[0]);
  const d = tf.max(tf.abs(tf.sub(a, b))).dataSync()[0] / scale;
  console.log(`  ${model.weights[i].name}: ${d.toExponential(3)}`);
  worst = Math.max(worst, d);
}
console.log(`TF.js resumed from autoshard's state vs autoshard resumed: ` +
            `max relative difference ${worst.toExponential(3)}`);
process.exit(worst <= 1e-4 ? 0 : 1);
