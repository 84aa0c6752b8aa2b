// The weights a Keras file holds, by the file's own name of each
// ("layers/dense/vars/0", "model_weights/dense/dense/kernel:0",
// "dense/kernel"), each readable block by block. The three formats fill
// one; load_keras_model maps its names onto the model's weight paths.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "autoshard/nn/weight_source.h"
#include "autoshard/tensor/tensor.h"
#include "io/keras/hdf5_file.h"

namespace autoshard::keras {

struct StoredWeight {
  Shape shape;
  // Reads the block [offset, offset + count) as f32 into dst (row-major).
  std::function<void(const std::vector<int64_t>& offset, const Shape& count, float* dst)> read;
  std::string where;  // "'file': dataset 'x'" for errors
};

using WeightTable = std::map<std::string, StoredWeight>;

// A dataset of an open HDF5 file.
StoredWeight h5_weight(std::shared_ptr<H5File> file, const std::string& path);

// The weights of a TensorFlow.js weightsManifest, their shard files found
// relative to `dir`; the optimizer's ("group": "optimizer", TF.js's
// optimizer state) are listed under "optimizer/<name>", and their keys in
// the manifest's order (TF.js's) appended to `optimizer` when given. Shard
// sizes are checked against the manifest; float32, int32 and the quantized
// uint8, uint16 and float16 encodings are read.
WeightTable tfjs_weights(const nlohmann::json& manifest, const std::string& dir,
                         const std::string& model_json,
                         std::vector<std::string>* optimizer = nullptr);

// A WeightSource over a stored weight: the shape must be the weight's own;
// a block holding NaN or infinity is an error naming `keras_name`.
WeightSource stored_source(const StoredWeight& w, const std::string& keras_name);

}  // namespace autoshard::keras
