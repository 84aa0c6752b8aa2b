// Keras 3 layers and activations that TensorFlow.js 4.x lacks or defines
// differently, written as TF.js layers from Keras 3's documented formulas so
// that they can sit in a tf.LayersModel (and its model.json) next to TF.js's
// own layers. Each class name is distinct from TF.js's, so a reader of the
// model.json can tell them apart:
//   KerasConv         Conv1D/Conv2D with groups > 1 or dilation_rate > 1
//                     (TF.js has no groups and no gradient through dilation)
//   GRUResetAfter     GRU with reset_after=True, Keras 3's default (TF.js
//                     throws for reset_after=True)
//   GroupNormalization  (not in TF.js)
//   Subtract          (not in TF.js)
//   KerasHardSigmoid  Keras 3's hard_sigmoid relu6(x + 3) / 6; TF.js's
//                     'hardSigmoid' is Keras 2's clip(0.2 x + 0.5, 0, 1)
//   KerasAveragePooling  AveragePooling1D/2D with padding 'same', and
//   KerasUpSampling2D    UpSampling2D: TF.js computes their outputs right but
//                     their input gradients wrong (avgPool's 'same' gradient
//                     and resizeNearestNeighbor's gradient), so these are
//                     written from ops whose gradients are right
import * as tf from '@tensorflow/tfjs';

const ACTIVATIONS = {
  linear: (x) => x,
  relu: (x) => tf.relu(x),
  tanh: (x) => tf.tanh(x),
  sigmoid: (x) => tf.sigmoid(x),
};

function activation(name) {
  const f = ACTIVATIONS[name ?? 'linear'];
  if (!f) throw new Error(`custom layers know no activation '${name}'`);
  return f;
}

// Spreads a kernel's taps `rate` apart with zeros between them: a convolution
// with dilation d is the plain convolution with this kernel, and its
// gradient flows back to the taps (TF.js's conv2d has no gradient for d > 1).
function dilateKernel(kernel, rates) {
  let k = kernel;
  rates.forEach((rate, axis) => {
    if (rate === 1) return;
    const taps = tf.split(k, k.shape[axis], axis), parts = [];
    const gapShape = k.shape.slice();
    gapShape[axis] = rate - 1;
    taps.forEach((t, i) => {
      parts.push(t);
      if (i + 1 < taps.length) parts.push(tf.zeros(gapShape));
    });
    k = tf.concat(parts, axis);
  });
  return k;
}

// Keras 3's Conv1D / Conv2D with groups > 1 or dilation_rate > 1 (TF.js's
// Conv2D has no groups and no gradient through dilation): each group of
// input channels convolved with its block of output channels, through the
// zero-spread kernel. Conv1D runs as Conv2D on a height-1 image.
export class KerasConv extends tf.layers.Layer {
  static className = 'KerasConv';
  constructor(config) {
    super(config);
    this.rank = config.rank;
    this.filters = config.filters;
    this.kernelSize = config.kernelSize;
    this.strides = config.strides;
    this.padding = config.padding;
    this.dilationRate = config.dilationRate;
    this.groups = config.groups;
    this.useBias = config.useBias;
    this.activationName = config.activation ?? 'linear';
  }
  build(inputShape) {
    const channels = inputShape[inputShape.length - 1];
    this.kernel = this.addWeight('kernel',
        [...this.kernelSize, channels / this.groups, this.filters], 'float32',
        tf.initializers.zeros());
    if (this.useBias) {
      this.bias = this.addWeight('bias', [this.filters], 'float32', tf.initializers.zeros());
    }
    this.built = true;
  }
  computeOutputShape(inputShape) {
    const out = [inputShape[0]];
    for (let i = 0; i < this.rank; ++i) {
      const n = inputShape[i + 1], s = this.strides[i];
      const k = (this.kernelSize[i] - 1) * this.dilationRate[i] + 1;
      out.push(this.padding === 'same' ? Math.ceil(n / s) : Math.floor((n - k) / s) + 1);
    }
    return [...out, this.filters];
  }
  call(inputs) {
    return tf.tidy(() => {
      let x = Array.isArray(inputs) ? inputs[0] : inputs;
      let k = dilateKernel(this.kernel.read(), this.dilationRate);
      let strides = this.strides;
      if (this.rank === 1) {
        x = tf.expandDims(x, 1);
        k = tf.expandDims(k, 0);
        strides = [1, strides[0]];
      }
      const cin = x.shape[3] / this.groups, cout = this.filters / this.groups;
      const parts = [];
      for (let g = 0; g < this.groups; ++g) {
        const xg = tf.slice(x, [0, 0, 0, g * cin], [-1, -1, -1, cin]);
        const kg = tf.slice(k, [0, 0, 0, g * cout], [-1, -1, -1, cout]);
        parts.push(tf.conv2d(xg, kg, strides, this.padding));
      }
      let y = parts.length === 1 ? parts[0] : tf.concat(parts, 3);
      if (this.rank === 1) y = tf.squeeze(y, [1]);
      if (this.useBias) y = tf.add(y, this.bias.read());
      return activation(this.activationName)(y);
    });
  }
  getConfig() {
    return {
      ...super.getConfig(), rank: this.rank, filters: this.filters, kernelSize: this.kernelSize,
      strides: this.strides, padding: this.padding, dilationRate: this.dilationRate,
      groups: this.groups, useBias: this.useBias, activation: this.activationName,
    };
  }
}

// Keras 3's GRU cell with reset_after=True, gates in the order z, r, h:
//   x_* = x W_* + b_in_*,  r_* = h U_* + b_rec_*   (bias [2, 3 units])
//   z = sigmoid(x_z + r_z), r = sigmoid(x_r + r_r)
//   h~ = tanh(x_h + r * r_h),  h' = z * h + (1 - z) * h~
export class GRUResetAfter extends tf.layers.Layer {
  static className = 'GRUResetAfter';
  constructor(config) {
    super(config);
    this.units = config.units;
    this.returnSequences = config.returnSequences ?? false;
    this.goBackwards = config.goBackwards ?? false;
  }
  build(inputShape) {
    const features = inputShape[inputShape.length - 1], u = this.units;
    const zeros = tf.initializers.zeros();
    this.kernel = this.addWeight('kernel', [features, 3 * u], 'float32', zeros);
    this.recurrentKernel = this.addWeight('recurrent_kernel', [u, 3 * u], 'float32', zeros);
    this.bias = this.addWeight('bias', [2, 3 * u], 'float32', zeros);
    this.built = true;
  }
  computeOutputShape(inputShape) {
    return this.returnSequences ? [inputShape[0], inputShape[1], this.units]
                                : [inputShape[0], this.units];
  }
  call(inputs) {
    return tf.tidy(() => {
      const x = Array.isArray(inputs) ? inputs[0] : inputs;
      const [batch, steps] = x.shape, u = this.units;
      const bias = this.bias.read();
      const bIn = tf.squeeze(tf.slice(bias, [0, 0], [1, -1]), [0]);
      const bRec = tf.squeeze(tf.slice(bias, [1, 0], [1, -1]), [0]);
      const k = this.kernel.read(), rk = this.recurrentKernel.read();
      let h = tf.zeros([batch, u]);
      const outputs = [];
      for (let i = 0; i < steps; ++i) {
        const t = this.goBackwards ? steps - 1 - i : i;
        const xt = tf.squeeze(tf.slice(x, [0, t, 0], [-1, 1, -1]), [1]);
        const xp = tf.add(tf.matMul(xt, k), bIn);
        const hp = tf.add(tf.matMul(h, rk), bRec);
        const [xz, xr, xh] = tf.split(xp, 3, 1);
        const [hz, hr, hh] = tf.split(hp, 3, 1);
        const z = tf.sigmoid(tf.add(xz, hz));
        const r = tf.sigmoid(tf.add(xr, hr));
        const candidate = tf.tanh(tf.add(xh, tf.mul(r, hh)));
        h = tf.add(tf.mul(z, h), tf.mul(tf.sub(1, z), candidate));
        outputs.push(h);
      }
      return this.returnSequences ? tf.stack(outputs, 1) : h;
    });
  }
  getConfig() {
    return {
      ...super.getConfig(), units: this.units, returnSequences: this.returnSequences,
      goBackwards: this.goBackwards, resetAfter: true,
    };
  }
}

// Keras 3's GroupNormalization over the last axis: channels split into
// `groups` contiguous groups, each normalised over its channels and every
// non-batch position (biased variance), then gamma * x + beta per channel.
export class GroupNormalization extends tf.layers.Layer {
  static className = 'GroupNormalization';
  constructor(config) {
    super(config);
    this.groups = config.groups;
    this.epsilon = config.epsilon ?? 1e-3;
  }
  build(inputShape) {
    const c = inputShape[inputShape.length - 1];
    this.gamma = this.addWeight('gamma', [c], 'float32', tf.initializers.ones());
    this.beta = this.addWeight('beta', [c], 'float32', tf.initializers.zeros());
    this.built = true;
  }
  computeOutputShape(inputShape) { return inputShape; }
  call(inputs) {
    return tf.tidy(() => {
      const x = Array.isArray(inputs) ? inputs[0] : inputs;
      const shape = x.shape, c = shape[shape.length - 1];
      const grouped = tf.reshape(x, [...shape.slice(0, -1), this.groups, c / this.groups]);
      const axes = [];
      for (let a = 1; a < grouped.rank; ++a) if (a !== grouped.rank - 2) axes.push(a);
      const {mean, variance} = tf.moments(grouped, axes, true);
      const normed = tf.div(tf.sub(grouped, mean), tf.sqrt(tf.add(variance, this.epsilon)));
      return tf.add(tf.mul(tf.reshape(normed, shape), this.gamma.read()), this.beta.read());
    });
  }
  getConfig() { return {...super.getConfig(), groups: this.groups, epsilon: this.epsilon}; }
}

// Average pooling with TensorFlow's 'same' padding (the odd zero after; each
// window averages only its positions inside the input): pad with zeros, sum
// each window with a 'valid' pool, divide by the window's count of real
// positions (the same pool over padded ones).
export class KerasAveragePooling extends tf.layers.Layer {
  static className = 'KerasAveragePooling';
  constructor(config) {
    super(config);
    this.rank = config.rank;
    this.poolSize = config.poolSize;
    this.strides = config.strides;
  }
  outputSize(n, i) { return Math.ceil(n / this.strides[i]); }
  computeOutputShape(s) {
    return [s[0], ...s.slice(1, 1 + this.rank).map((n, i) => this.outputSize(n, i)),
            s[s.length - 1]];
  }
  call(inputs) {
    return tf.tidy(() => {
      let x = Array.isArray(inputs) ? inputs[0] : inputs;
      if (this.rank === 1) x = tf.expandDims(x, 1);
      const size = this.rank === 1 ? [1, this.poolSize[0]] : this.poolSize;
      const strides = this.rank === 1 ? [1, this.strides[0]] : this.strides;
      const pads = [[0, 0]];
      for (let i = 0; i < 2; ++i) {
        const n = x.shape[i + 1], out = Math.ceil(n / strides[i]);
        const total = Math.max((out - 1) * strides[i] + size[i] - n, 0);
        pads.push([Math.floor(total / 2), total - Math.floor(total / 2)]);
      }
      pads.push([0, 0]);
      const sums = tf.avgPool(tf.pad(x, pads), size, strides, 'valid');
      const counts = tf.avgPool(tf.pad(tf.onesLike(x), pads), size, strides, 'valid');
      const y = tf.div(sums, counts);
      return this.rank === 1 ? tf.squeeze(y, [1]) : y;
    });
  }
  getConfig() {
    return {...super.getConfig(), rank: this.rank, poolSize: this.poolSize,
            strides: this.strides, padding: 'same'};
  }
}

// Nearest-neighbour up-sampling by whole factors: each row repeated size[0]
// times and each column size[1] times, by broadcasting.
export class KerasUpSampling2D extends tf.layers.Layer {
  static className = 'KerasUpSampling2D';
  constructor(config) {
    super(config);
    this.size = config.size;
  }
  computeOutputShape(s) { return [s[0], s[1] * this.size[0], s[2] * this.size[1], s[3]]; }
  call(inputs) {
    return tf.tidy(() => {
      const x = Array.isArray(inputs) ? inputs[0] : inputs;
      const [b, h, w, c] = x.shape, [sh, sw] = this.size;
      const spread = tf.mul(tf.reshape(x, [b, h, 1, w, 1, c]), tf.ones([1, 1, sh, 1, sw, 1]));
      return tf.reshape(spread, [b, h * sh, w * sw, c]);
    });
  }
  getConfig() { return {...super.getConfig(), size: this.size, interpolation: 'nearest'}; }
}

export class Subtract extends tf.layers.Layer {
  static className = 'Subtract';
  computeOutputShape(inputShape) { return inputShape[0]; }
  call(inputs) { return tf.tidy(() => tf.sub(inputs[0], inputs[1])); }
}

export class KerasHardSigmoid extends tf.layers.Layer {
  static className = 'KerasHardSigmoid';
  computeOutputShape(inputShape) { return inputShape; }
  call(inputs) {
    return tf.tidy(() => {
      const x = Array.isArray(inputs) ? inputs[0] : inputs;
      return tf.div(tf.relu6(tf.add(x, 3)), 6);
    });
  }
}

for (const c of [KerasConv, KerasAveragePooling, KerasUpSampling2D, GRUResetAfter, GroupNormalization, Subtract, KerasHardSigmoid]) {
  tf.serialization.registerClass(c);
}
