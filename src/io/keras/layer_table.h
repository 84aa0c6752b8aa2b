// The Keras layer table: the one place a Keras layer class name maps to an
// autoshard layer. Each entry is a builder that reads the layer's Keras
// config (as Keras 3's get_config gives it, or Keras 2's and TF.js's forms
// of it) through a LayerConfig and returns the C++ layer with its weights'
// names. The .keras, .h5 and TF.js readers build every layer through it.
//
// The entries live in one file per Keras layer family under
// src/io/keras/layers/ (core, conv, pooling, reshaping, normalization,
// merge, recurrent, attention, preprocessing); each family's file has one add_*_layers function,
// called by layer_table() below. To add a Keras layer: one builder and one
// `table.add("ClassName", ...)` line in its family's file (docs/architecture.md,
// "Keras layers").
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "io/keras/architecture.h"
#include "io/keras/layer_config.h"

namespace autoshard::keras {

// Builds one layer from its config; the table calls f.finish() afterwards,
// so a builder reads (or checks) every field it supports and no more.
using LayerBuilder = std::function<BuiltLayer(LayerConfig& f)>;

class LayerTable {
 public:
  // Registers `cls`; a class registered twice is a programming error.
  void add(const std::string& cls, LayerBuilder build);
  // The builder of `cls`, or nullptr when autoshard does not have it.
  const LayerBuilder* find(const std::string& cls) const;
  // Every class, sorted.
  std::vector<std::string> classes() const;

 private:
  std::map<std::string, LayerBuilder> builders_;
};

// The table of every family, built once.
const LayerTable& layer_table();

// The C++ layer of a Keras layer (a nested model included). Throws naming
// layer, field and value; a class not in the table is "not supported yet".
BuiltLayer build_layer(const LayerSpec& spec, const BuildContext& ctx);

// Each family's entries (src/io/keras/layers/<family>.cc).
void add_core_layers(LayerTable& table);           // Dense, Embedding, activations, Dropout
void add_conv_layers(LayerTable& table);           // Conv1D, Conv2D, ...
void add_pooling_layers(LayerTable& table);        // MaxPooling2D, GlobalAveragePooling1D, ...
void add_reshaping_layers(LayerTable& table);      // Flatten, Reshape, ZeroPadding2D, ...
void add_normalization_layers(LayerTable& table);  // BatchNormalization, LayerNormalization, ...
void add_merge_layers(LayerTable& table);          // Add, Concatenate, ...
void add_recurrent_layers(LayerTable& table);  // LSTM, GRU, SimpleRNN, Bidirectional, ConvLSTM2D
void add_attention_layers(LayerTable& table);  // Attention
void add_preprocessing_layers(LayerTable& table);  // Normalization, CenterCrop, RandomFlip, ...

}  // namespace autoshard::keras
