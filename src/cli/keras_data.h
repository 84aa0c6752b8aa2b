// The arrays a Keras model runs on, from NumPy files (--x, --y,
// --validation-x, --validation-y), checked against the model's inputs and
// outputs before any step: an .npy for a model of one input (or output), an
// .npz keyed by input names (or output names) for several.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "autoshard/io/keras_model.h"
#include "autoshard/io/npy.h"

namespace autoshard::cli {

// Tensors by input (or output) name; "" for the one tensor of a model with
// one input (or output), as ModelInputs takes them.
using NamedArrays = std::map<std::string, Tensor>;

// The model's inputs from `path`: every input present with its per-example
// shape (None dimensions match anything), converted to the input's dtype
// (float token ids become int32 when whole numbers).
NamedArrays read_keras_inputs(const KerasModel& model, const std::string& path,
                              const std::string& flag);
// The same for arrays already read from `path` (read_arrays).
NamedArrays keras_inputs_of(const KerasModel& model, std::map<std::string, NpyArray> arrays,
                            const std::string& path, const std::string& flag);
// The per-example shapes of arrays read for a model's inputs, as
// KerasLoadOptions::input_shapes takes them (the sizes of the dimensions a
// file leaves open): by name, or "" for a file of one array.
std::map<std::string, Shape> example_shapes(const std::map<std::string, NpyArray>& arrays);

// The targets of the model's outputs from `path`, shaped as the loss of
// each output takes them: class ids (N,) or (N, 1) as int32 for sparse
// losses, the output's own shape as float32 otherwise ((N,) for an output
// of one unit too). `losses` are the compile config's loss names (one per
// output, or one for all).
NamedArrays read_keras_targets(const KerasModel& model, const std::vector<std::string>& losses,
                               const std::string& path, const std::string& flag);

// Fills the per-example shape of outputs the model file leaves unknown
// (empty), from a trace of the forward pass where it can; an output still
// unknown takes targets of any shape (the loss checks them).
void infer_output_shapes(KerasModel& model);

// The examples (first dimension) every array holds; `what` names them.
int64_t example_count(const NamedArrays& arrays, const std::string& what);

// The examples at `indices` of every array (a batch, in that order).
NamedArrays take_rows(const NamedArrays& arrays, const std::vector<int64_t>& indices);
// Rows [begin, end) of every array.
NamedArrays slice_rows(const NamedArrays& arrays, int64_t begin, int64_t end);

}  // namespace autoshard::cli
