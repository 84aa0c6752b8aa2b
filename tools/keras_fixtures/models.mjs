// The models the fixtures cover, written as Keras 3 specs: layer classes,
// names and options exactly as Keras 3 spells them (snake_case, channels_last,
// every option that matters written out with Keras 3's default when not set),
// so that a C++ test can build the same model by hand from this JSON alone.
//
// A spec: {name, batch, inputs: [{name, shape, dtype, vocab?}], layers:
// [{class_name, name, config}], nodes: [{layer, inbound: [ids]}] (omitted for
// a chain: each layer takes the previous one's output), outputs: [ids],
// losses: [{name, ...options}] (one per output), loss_weights}. A node's id is
// its layer's name; "lstm:1" is a layer's second output (return_state).

const DEFAULTS = {
  Dense: {activation: 'linear', use_bias: true},
  Conv1D: {strides: [1], padding: 'valid', dilation_rate: [1], groups: 1, activation: 'linear',
           use_bias: true},
  Conv2D: {strides: [1, 1], padding: 'valid', dilation_rate: [1, 1], groups: 1,
           activation: 'linear', use_bias: true},
  Conv3D: {strides: [1, 1, 1], padding: 'valid', dilation_rate: [1, 1, 1], groups: 1,
           activation: 'linear', use_bias: true},
  DepthwiseConv2D: {strides: [1, 1], padding: 'valid', depth_multiplier: 1,
                    dilation_rate: [1, 1], activation: 'linear', use_bias: true},
  SeparableConv2D: {strides: [1, 1], padding: 'valid', depth_multiplier: 1,
                    dilation_rate: [1, 1], activation: 'linear', use_bias: true},
  Conv2DTranspose: {strides: [1, 1], padding: 'valid', dilation_rate: [1, 1],
                    activation: 'linear', use_bias: true},
  MaxPooling1D: {padding: 'valid'},
  AveragePooling1D: {padding: 'valid'},
  MaxPooling2D: {padding: 'valid'},
  AveragePooling2D: {padding: 'valid'},
  MaxPooling3D: {padding: 'valid'},
  AveragePooling3D: {padding: 'valid'},
  BatchNormalization: {axis: -1, momentum: 0.99, epsilon: 1e-3, center: true, scale: true},
  GroupNormalization: {axis: -1, epsilon: 1e-3, center: true, scale: true},
  LSTM: {activation: 'tanh', recurrent_activation: 'sigmoid', use_bias: true,
         unit_forget_bias: true, return_sequences: false, return_state: false,
         go_backwards: false},
  GRU: {activation: 'tanh', recurrent_activation: 'sigmoid', use_bias: true, reset_after: true,
        return_sequences: false, return_state: false, go_backwards: false},
  SimpleRNN: {activation: 'tanh', use_bias: true, return_sequences: false, return_state: false,
              go_backwards: false},
  Bidirectional: {merge_mode: 'concat'},
  Concatenate: {axis: -1},
  UpSampling2D: {interpolation: 'nearest'},
  Rescaling: {offset: 0},
  LeakyReLU: {negative_slope: 0.2},
};

export function layer(class_name, name, config = {}) {
  const full = {...(DEFAULTS[class_name] ?? {}), ...config};
  // Pooling strides default to the pool size (Keras).
  if (/Pooling[123]D$/.test(class_name) && !class_name.startsWith('Global') && !full.strides) {
    full.strides = full.pool_size;
  }
  if (class_name === 'Bidirectional') full.layer = layer(config.layer.class_name,
      config.layer.name, config.layer.config);
  return {class_name, name, config: full};
}

const input = (shape, name = 'x', extra = {}) => ({name, shape, dtype: 'float32', ...extra});
const mse = [{name: 'mean_squared_error'}];

// A chain of layers on one input, trained on one loss (MSE by default).
function chain(name, inputShape, layers, losses = mse, extra = {}) {
  return {name, batch: 3, inputs: [input(inputShape)], layers,
          outputs: [layers[layers.length - 1].name], losses, loss_weights: [1], ...extra};
}

// Each activation after a Dense layer, then a Dense head.
const ACTIVATIONS = ['linear', 'relu', 'relu6', 'elu', 'selu', 'gelu', 'gelu_tanh', 'sigmoid',
                     'hard_sigmoid', 'tanh', 'softmax', 'log_softmax', 'swish', 'silu', 'softplus',
                     'mish'];

function activationModels() {
  const models = ACTIVATIONS.map((a) => chain(`activation_${a}`, [7], [
    layer('Dense', 'dense', {units: 5, activation: a}), layer('Dense', 'head', {units: 3})]));
  models.push(chain('activation_leaky_relu', [7], [
    layer('Dense', 'dense', {units: 5}), layer('LeakyReLU', 'leaky_relu'),
    layer('Dense', 'head', {units: 3})]));
  models.push(chain('activation_layer_elu', [7], [
    layer('Dense', 'dense', {units: 5}), layer('Activation', 'act', {activation: 'elu'}),
    layer('Dense', 'head', {units: 3})]));
  return models;
}

function convolutionModels() {
  return [
    chain('conv1d_same_dilated', [11, 3], [layer('Conv1D', 'conv', {
      filters: 5, kernel_size: [3], padding: 'same', dilation_rate: [2], activation: 'tanh'})]),
    chain('conv1d_stride2', [11, 3], [layer('Conv1D', 'conv', {
      filters: 4, kernel_size: [3], strides: [2]})]),
    chain('conv2d_stride2_valid', [9, 9, 3], [layer('Conv2D', 'conv', {
      filters: 5, kernel_size: [3, 3], strides: [2, 2], activation: 'relu'})]),
    chain('conv2d_stride2_same', [9, 7, 3], [layer('Conv2D', 'conv', {
      filters: 5, kernel_size: [3, 3], strides: [2, 2], padding: 'same'})]),
    chain('conv2d_dilated_same_nobias', [8, 9, 2], [layer('Conv2D', 'conv', {
      filters: 3, kernel_size: [3, 3], padding: 'same', dilation_rate: [2, 2],
      use_bias: false})]),
    chain('conv2d_kernel_2x3', [7, 8, 3], [layer('Conv2D', 'conv', {
      filters: 4, kernel_size: [2, 3], strides: [1, 2], padding: 'same'})]),
    chain('conv2d_groups', [7, 7, 6], [layer('Conv2D', 'conv', {
      filters: 9, kernel_size: [3, 3], strides: [2, 2], padding: 'same', groups: 3})]),
    chain('depthwise_conv2d', [9, 9, 3], [layer('DepthwiseConv2D', 'depthwise', {
      kernel_size: [3, 3], strides: [2, 2], padding: 'same', depth_multiplier: 2})]),
    chain('separable_conv2d', [9, 8, 3], [layer('SeparableConv2D', 'separable', {
      filters: 5, kernel_size: [3, 3], padding: 'same', activation: 'relu'})]),
    chain('conv2d_transpose_same', [5, 4, 3], [layer('Conv2DTranspose', 'deconv', {
      filters: 4, kernel_size: [3, 3], strides: [2, 2], padding: 'same'})]),
    chain('conv2d_transpose_valid', [4, 5, 2], [layer('Conv2DTranspose', 'deconv', {
      filters: 3, kernel_size: [3, 3], strides: [2, 2]})]),
  ];
}

function poolingModels() {
  return [
    chain('max_pooling1d', [11, 3], [layer('MaxPooling1D', 'pool', {pool_size: [3], strides: [2]})]),
    chain('average_pooling1d_same', [11, 3], [layer('AveragePooling1D', 'pool', {
      pool_size: [2], padding: 'same'})]),
    chain('max_pooling2d_valid', [9, 9, 3], [layer('MaxPooling2D', 'pool', {
      pool_size: [3, 3], strides: [2, 2]})]),
    chain('max_pooling2d_same', [7, 9, 2], [layer('MaxPooling2D', 'pool', {
      pool_size: [2, 2], padding: 'same'})]),
    chain('average_pooling2d_same', [9, 7, 3], [layer('AveragePooling2D', 'pool', {
      pool_size: [3, 3], strides: [2, 2], padding: 'same'})]),
    chain('average_pooling2d_valid', [8, 9, 2], [layer('AveragePooling2D', 'pool', {
      pool_size: [2, 3]})]),
    chain('global_average_pooling1d', [7, 5], [layer('GlobalAveragePooling1D', 'pool')]),
    chain('global_max_pooling1d', [7, 5], [layer('GlobalMaxPooling1D', 'pool')]),
    chain('global_average_pooling2d', [5, 7, 3], [layer('GlobalAveragePooling2D', 'pool')]),
    chain('global_max_pooling2d', [5, 7, 3], [layer('GlobalMaxPooling2D', 'pool')]),
  ];
}

function normalizationModels() {
  return [
    {...chain('batch_normalization', [5, 5, 3], [layer('BatchNormalization', 'bn')]), batch: 6},
    // No bias before BatchNormalization (as Keras users write it): the
    // normalisation cancels it, so its gradient is exactly zero and both
    // sides' rounding noise, which Adam's steps would amplify.
    chain('batch_normalization_dense', [7], [
      layer('Dense', 'dense', {units: 5, use_bias: false}), layer('BatchNormalization', 'bn', {
        momentum: 0.9, epsilon: 1e-2}),
      layer('Dense', 'head', {units: 3})]),
    chain('group_normalization', [4, 3, 6], [layer('GroupNormalization', 'gn', {groups: 3})]),
  ];
}

function recurrentModels() {
  const lstm = (name, config) => layer('LSTM', name, config);
  return [
    chain('lstm_sequences', [5, 3], [lstm('lstm', {units: 7, return_sequences: true})]),
    chain('lstm_last', [7, 4], [lstm('lstm', {units: 5})]),
    {name: 'lstm_state_backwards', batch: 3, inputs: [input([6, 3])],
     layers: [lstm('lstm', {units: 5, return_state: true, go_backwards: true}), layer('Add', 'add')],
     nodes: [{layer: 'lstm', inbound: ['x']}, {layer: 'add', inbound: ['lstm:0', 'lstm:2']}],
     outputs: ['add'], losses: mse, loss_weights: [1]},
    chain('gru_reset_after', [6, 4], [layer('GRU', 'gru', {units: 5, return_sequences: true})]),
    chain('gru_reset_after_backwards', [5, 3], [layer('GRU', 'gru', {units: 3,
      go_backwards: true})]),
    chain('gru_reset_before', [6, 4], [layer('GRU', 'gru', {units: 5, return_sequences: true,
      reset_after: false})]),
    chain('simple_rnn', [7, 3], [layer('SimpleRNN', 'rnn', {units: 5, return_sequences: true})]),
    ...['concat', 'sum', 'mul', 'ave'].map((mode) => chain(`bidirectional_${mode}`, [5, 3], [
      layer('Bidirectional', 'bidi', {merge_mode: mode, layer: {class_name: 'LSTM', name: 'lstm',
        config: {units: 3, return_sequences: true}}})])),
    chain('bidirectional_gru_last', [6, 2], [layer('Bidirectional', 'bidi', {layer: {
      class_name: 'GRU', name: 'gru', config: {units: 3, reset_after: false}}})]),
  ];
}

function twoInputs(name, class_name, shapeA, shapeB, config = {}) {
  return {name, batch: 3, inputs: [input(shapeA, 'a'), input(shapeB, 'b')],
          layers: [layer(class_name, 'merge', config)],
          nodes: [{layer: 'merge', inbound: ['a', 'b']}], outputs: ['merge'], losses: mse,
          loss_weights: [1]};
}

function shapeModels() {
  return [
    chain('flatten', [3, 5, 2], [layer('Flatten', 'flatten'), layer('Dense', 'head', {units: 3})]),
    chain('reshape', [6, 2], [layer('Reshape', 'reshape', {target_shape: [3, 4]})]),
    chain('permute', [3, 5, 2], [layer('Permute', 'permute', {dims: [2, 3, 1]})]),
    chain('repeat_vector', [5], [layer('RepeatVector', 'repeat', {n: 3})]),
    chain('zero_padding2d', [5, 4, 3], [layer('ZeroPadding2D', 'pad', {
      padding: [[1, 2], [0, 1]]})]),
    chain('up_sampling2d', [3, 4, 2], [layer('UpSampling2D', 'up', {size: [2, 3]})]),
    chain('cropping2d', [7, 6, 2], [layer('Cropping2D', 'crop', {cropping: [[1, 2], [2, 0]]})]),
    chain('rescaling', [4, 3], [layer('Rescaling', 'rescale', {scale: 0.5, offset: -0.25})]),
    twoInputs('concatenate', 'Concatenate', [3, 4], [3, 2]),
    twoInputs('concatenate_axis1', 'Concatenate', [3, 4], [2, 4], {axis: 1}),
    twoInputs('add', 'Add', [3, 4], [3, 4]),
    twoInputs('subtract', 'Subtract', [3, 4], [3, 4]),
    twoInputs('multiply', 'Multiply', [3, 4], [3, 4]),
    twoInputs('average', 'Average', [3, 4], [3, 4]),
    twoInputs('maximum', 'Maximum', [3, 4], [3, 4]),
  ];
}

// One Dense layer trained on each loss.
function lossModels() {
  const dense = (activation) => [layer('Dense', 'dense', {units: 4, activation})];
  return [
    chain('loss_mean_absolute_error', [6], dense('linear'), [{name: 'mean_absolute_error'}]),
    chain('loss_huber', [6], dense('linear'), [{name: 'huber', delta: 0.5}]),
    chain('loss_categorical_logits', [6], dense('linear'), [{name: 'categorical_crossentropy',
      from_logits: true, label_smoothing: 0.2}]),
    chain('loss_categorical_probabilities', [6], dense('softmax'), [{
      name: 'categorical_crossentropy', from_logits: false, label_smoothing: 0.1}]),
    chain('loss_sparse_categorical_logits', [6], dense('linear'), [{
      name: 'sparse_categorical_crossentropy', from_logits: true}]),
    chain('loss_sparse_categorical_probabilities', [6], dense('softmax'), [{
      name: 'sparse_categorical_crossentropy', from_logits: false}]),
    chain('loss_binary_logits', [6], dense('linear'), [{name: 'binary_crossentropy',
      from_logits: true, label_smoothing: 0.1}]),
    chain('loss_binary_probabilities', [6], dense('sigmoid'), [{name: 'binary_crossentropy',
      from_logits: false, label_smoothing: 0}]),
  ];
}

// Whole models: a small ResNet-style CNN, a U-Net, a Siamese pair with a
// shared layer, two outputs with loss weights, a Conv1D + LSTM classifier and
// a two-layer LSTM language model.
function wholeModels() {
  const sparse = [{name: 'sparse_categorical_crossentropy', from_logits: true}];
  return [
    {name: 'resnet_cnn', batch: 4, inputs: [input([11, 11, 3])],
     layers: [
       layer('Conv2D', 'stem', {filters: 5, kernel_size: [3, 3], strides: [2, 2], padding: 'same',
                                use_bias: false}),
       layer('BatchNormalization', 'stem_bn'),
       layer('Activation', 'stem_relu', {activation: 'relu'}),
       layer('Conv2D', 'block_conv', {filters: 5, kernel_size: [3, 3], padding: 'same',
                                      activation: 'relu'}),
       layer('Add', 'residual'),
       layer('MaxPooling2D', 'pool', {pool_size: [2, 2], padding: 'same'}),
       layer('GlobalAveragePooling2D', 'gap'),
       layer('Dense', 'logits', {units: 4})],
     nodes: [{layer: 'stem', inbound: ['x']}, {layer: 'stem_bn', inbound: ['stem']},
             {layer: 'stem_relu', inbound: ['stem_bn']},
             {layer: 'block_conv', inbound: ['stem_relu']},
             {layer: 'residual', inbound: ['stem_relu', 'block_conv']},
             {layer: 'pool', inbound: ['residual']}, {layer: 'gap', inbound: ['pool']},
             {layer: 'logits', inbound: ['gap']}],
     outputs: ['logits'], losses: sparse, loss_weights: [1]},
    {name: 'unet', batch: 2, inputs: [input([6, 6, 2])],
     layers: [
       layer('Conv2D', 'down', {filters: 3, kernel_size: [3, 3], padding: 'same',
                                activation: 'relu'}),
       layer('MaxPooling2D', 'pool', {pool_size: [2, 2]}),
       layer('Conv2D', 'bottom', {filters: 4, kernel_size: [3, 3], padding: 'same'}),
       layer('UpSampling2D', 'up', {size: [2, 2]}),
       layer('Concatenate', 'skip'),
       layer('Conv2D', 'out', {filters: 1, kernel_size: [1, 1], activation: 'sigmoid'})],
     nodes: [{layer: 'down', inbound: ['x']}, {layer: 'pool', inbound: ['down']},
             {layer: 'bottom', inbound: ['pool']}, {layer: 'up', inbound: ['bottom']},
             {layer: 'skip', inbound: ['down', 'up']}, {layer: 'out', inbound: ['skip']}],
     outputs: ['out'], losses: [{name: 'binary_crossentropy', from_logits: false,
                                 label_smoothing: 0}], loss_weights: [1]},
    {name: 'siamese', batch: 3, inputs: [input([6], 'a'), input([6], 'b')],
     layers: [layer('Dense', 'shared', {units: 4, activation: 'tanh'}), layer('Subtract', 'diff'),
              layer('Dense', 'score', {units: 1})],
     nodes: [{id: 'left', layer: 'shared', inbound: ['a']},
             {id: 'right', layer: 'shared', inbound: ['b']},
             {layer: 'diff', inbound: ['left', 'right']}, {layer: 'score', inbound: ['diff']}],
     outputs: ['score'], losses: [{name: 'binary_crossentropy', from_logits: true,
                                   label_smoothing: 0}], loss_weights: [1]},
    {name: 'two_outputs', batch: 3, inputs: [input([5])],
     layers: [layer('Dense', 'trunk', {units: 6, activation: 'relu'}),
              layer('Dense', 'classes', {units: 3}), layer('Dense', 'value', {units: 2})],
     nodes: [{layer: 'trunk', inbound: ['x']}, {layer: 'classes', inbound: ['trunk']},
             {layer: 'value', inbound: ['trunk']}],
     outputs: ['classes', 'value'], losses: [sparse[0], mse[0]], loss_weights: [1, 0.5]},
    chain('conv1d_lstm', [9, 4], [
      layer('Conv1D', 'conv', {filters: 6, kernel_size: [3], padding: 'same', activation: 'relu'}),
      layer('MaxPooling1D', 'pool', {pool_size: [2]}), layer('LSTM', 'lstm', {units: 5}),
      layer('Dense', 'logits', {units: 3})], sparse),
    {name: 'lstm_language_model', batch: 2,
     inputs: [{name: 'x', shape: [6], dtype: 'int32', vocab: 11}],
     layers: [layer('Embedding', 'embedding', {input_dim: 11, output_dim: 5}),
              layer('LSTM', 'lstm_1', {units: 7, return_sequences: true}),
              layer('LSTM', 'lstm_2', {units: 6, return_sequences: true}),
              layer('Dense', 'logits', {units: 11})],
     outputs: ['logits'], losses: sparse, loss_weights: [1]},
  ];
}

// Keras's 3-D layers (TF.js has Conv3D, MaxPooling3D and AveragePooling3D):
// strides, 'same' padding and a kernel of three different extents, then a
// small volume classifier of them. Last in the list, so the models before
// keep their index (the C++ test rotates meshes by it).
function volumeModels() {
  return [
    chain('conv3d_stride2_same', [5, 6, 7, 2], [layer('Conv3D', 'conv', {
      filters: 4, kernel_size: [2, 3, 2], strides: [2, 1, 2], padding: 'same',
      activation: 'tanh'})]),
    chain('conv3d_valid', [4, 5, 6, 3], [layer('Conv3D', 'conv', {
      filters: 3, kernel_size: [3, 2, 3]})]),
    // TF.js's MaxPooling3D input gradient is right only for windows tiling
    // the input (make_fixtures.mjs, DIFFERENCES): volume_cnn's; the others
    // against NumPy (python/tests/test_volume_layers.py).
    chain('average_pooling3d_valid', [5, 6, 7, 2], [layer('AveragePooling3D', 'pool', {
      pool_size: [2, 2, 3], strides: [1, 2, 2]})]),
    chain('volume_cnn', [6, 6, 6, 2], [
      layer('Conv3D', 'conv_1', {filters: 4, kernel_size: [3, 3, 3], padding: 'same',
                                 activation: 'relu'}),
      layer('MaxPooling3D', 'pool_1', {pool_size: [2, 2, 2]}),
      layer('Conv3D', 'conv_2', {filters: 3, kernel_size: [2, 2, 2]}),
      layer('AveragePooling3D', 'pool_2', {pool_size: [2, 2, 2]}),
      layer('Flatten', 'flatten'), layer('Dense', 'logits', {units: 3})],
    [{name: 'sparse_categorical_crossentropy', from_logits: true}]),
  ];
}

export function allModels() {
  return [...activationModels(), ...convolutionModels(), ...poolingModels(),
          ...normalizationModels(), ...recurrentModels(), ...shapeModels(), ...lossModels(),
          ...wholeModels(), ...volumeModels()];
}
