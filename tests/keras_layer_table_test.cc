// The Keras layer table (src/io/keras/layer_table.h): every class the
// readers support has exactly one entry, and a config goes to the C++ layer
// through it with the same checks whichever file format it came from.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "autoshard/error.h"
#include "io/keras/layer_table.h"

namespace autoshard::keras {
namespace {

TEST(KerasLayerTable, HoldsEveryClassTheReadersSupport) {
  const std::vector<std::string> expected = {"Activation",
                                             "Add",
                                             "AdditiveAttention",
                                             "Attention",
                                             "Average",
                                             "AveragePooling1D",
                                             "AveragePooling2D",
                                             "AveragePooling3D",
                                             "BatchNormalization",
                                             "Bidirectional",
                                             "CategoryEncoding",
                                             "CenterCrop",
                                             "Concatenate",
                                             "Conv1D",
                                             "Conv2D",
                                             "Conv2DTranspose",
                                             "Conv3D",
                                             "ConvLSTM1D",
                                             "ConvLSTM2D",
                                             "ConvLSTM3D",
                                             "Cropping1D",
                                             "Cropping2D",
                                             "Cropping3D",
                                             "Dense",
                                             "DepthwiseConv2D",
                                             "Discretization",
                                             "Dot",
                                             "Dropout",
                                             "ELU",
                                             "Embedding",
                                             "Flatten",
                                             "GRU",
                                             "GlobalAveragePooling1D",
                                             "GlobalAveragePooling2D",
                                             "GlobalAveragePooling3D",
                                             "GlobalMaxPooling1D",
                                             "GlobalMaxPooling2D",
                                             "GlobalMaxPooling3D",
                                             "GroupNormalization",
                                             "LSTM",
                                             "LayerNormalization",
                                             "LeakyReLU",
                                             "Masking",
                                             "MaxPooling1D",
                                             "MaxPooling2D",
                                             "MaxPooling3D",
                                             "Maximum",
                                             "Minimum",
                                             "MultiHeadAttention",
                                             "Multiply",
                                             "Normalization",
                                             "Permute",
                                             "RandomBrightness",
                                             "RandomContrast",
                                             "RandomCrop",
                                             "RandomFlip",
                                             "RandomRotation",
                                             "RandomTranslation",
                                             "RandomZoom",
                                             "ReLU",
                                             "RepeatVector",
                                             "Rescaling",
                                             "Reshape",
                                             "Resizing",
                                             "SeparableConv2D",
                                             "SimpleRNN",
                                             "Softmax",
                                             "SpatialDropout1D",
                                             "SpatialDropout2D",
                                             "Subtract",
                                             "UpSampling2D",
                                             "UpSampling3D",
                                             "ZeroPadding1D",
                                             "ZeroPadding2D",
                                             "ZeroPadding3D"};
  EXPECT_EQ(layer_table().classes(), expected);
}

TEST(KerasLayerTable, BuildsFromAKeras3ConfigAndNamesTheWeights) {
  LayerSpec spec;
  spec.cls = "Dense";
  spec.name = "d";
  spec.config = {{"name", "d"},
                 {"units", 3},
                 {"activation", "relu"},
                 {"use_bias", true},
                 {"kernel_initializer", {{"class_name", "GlorotUniform"}}}};
  const BuiltLayer built = build_layer(spec, BuildContext{});
  EXPECT_EQ(built.layer.name(), "d");
  ASSERT_EQ(built.weights.size(), 2u);
  EXPECT_EQ(built.weights[0].cpp, "kernel");
  EXPECT_EQ(built.weights[1].k3, "vars/1");
}

TEST(KerasLayerTable, RefusesUnknownClassesAndUnreadFields) {
  LayerSpec spec;
  spec.cls = "NoSuchLayer";
  spec.name = "n";
  spec.config = nlohmann::json::object();
  BuildContext ctx;
  ctx.where = "m.keras";
  try {
    build_layer(spec, ctx);
    FAIL() << "built an unknown class";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "m.keras: layer 'n' of class 'NoSuchLayer' is not supported yet");
  }
  spec.cls = "Flatten";
  spec.config = {{"surprise", 1}};
  try {
    build_layer(spec, ctx);
    FAIL() << "accepted a field nobody read";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "m.keras: layer 'n' (Flatten): field 'surprise' = 1 is not supported");
  }
}

// A file's call arguments (a Keras 3 node's kwargs) reach the builder as
// fields: Attention's return_attention_scores makes a layer of two outputs,
// and a layer that has no such argument refuses it by name.
TEST(KerasLayerTable, ReadsCallArgumentsAsFields) {
  LayerSpec spec;
  spec.cls = "Attention";
  spec.name = "a";
  spec.config = {{"name", "a"}, {"use_scale", true}, {"score_mode", "concat"}, {"dropout", 0.0}};
  const BuiltLayer plain = build_layer(spec, BuildContext{});
  EXPECT_EQ(plain.layer.output_count(), 1);
  ASSERT_EQ(plain.weights.size(), 2u);
  EXPECT_EQ(plain.weights[1].cpp, "concat_score_weight");
  EXPECT_EQ(plain.weights[1].k3, "vars/1");
  spec.call_kwargs = {{"use_causal_mask", true}, {"return_attention_scores", true}};
  EXPECT_EQ(build_layer(spec, BuildContext{}).layer.output_count(), 2);
  spec.cls = "Flatten";
  spec.config = nlohmann::json::object();
  spec.call_kwargs = {{"use_causal_mask", true}};
  BuildContext ctx;
  ctx.where = "m.keras";
  try {
    build_layer(spec, ctx);
    FAIL() << "Flatten took use_causal_mask";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "m.keras: layer 'a' (Flatten): field 'use_causal_mask' = true is not supported");
  }
}

}  // namespace
}  // namespace autoshard::keras
