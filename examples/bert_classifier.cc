// Fine-tunes a BERT sequence classifier with the Keras-style API on a mesh:
// named inputs {"token_ids", "segment_ids", "padding_mask"}, fit with
// metrics = {accuracy}, evaluate on held-out examples.
//
//   build/examples/bert_classifier                              # a small random BERT,
//   data=2,model=2 build/examples/bert_classifier --weights path/to/bert-dir --mesh model=4
//   --epochs 3
//
// The task is synthetic, so it runs anywhere: is token 7 in the sequence?
// Sequences of random length are padded; the classifier must find the token
// wherever it is (attention) and ignore the padding (the mask).
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>

#include "autoshard/autoshard.h"

using namespace autoshard;

namespace {

struct Data {
  Tensor ids, segments, mask, labels;
  ModelInputs inputs() const {
    return {{"token_ids", ids}, {"segment_ids", segments}, {"padding_mask", mask}};
  }
};

// n sequences of S tokens: [CLS] (2), then random tokens from 8 up, padded
// with 0 after a random length, the second half of the tokens of segment 1
// when the model has two token types; half of them get token 7 somewhere.
Data make_data(int64_t n, int64_t S, int64_t vocab, int64_t token_types, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Data d{Tensor({n, S}, DType::I32), Tensor::zeros({n, S}, DType::I32), Tensor::zeros({n, S}),
         Tensor({n}, DType::I32)};
  for (int64_t i = 0; i < n; ++i) {
    const int64_t length = 3 + int64_t(rng() % uint64_t(S - 2));
    const bool positive = i % 2 == 0;
    for (int64_t s = 0; s < S; ++s) {
      int32_t token = s == 0 ? 2 : s < length ? int32_t(8 + rng() % uint64_t(vocab - 8)) : 0;
      d.ids.i32()[i * S + s] = token;
      d.mask.f32()[i * S + s] = s < length ? 1.0f : 0.0f;
      d.segments.i32()[i * S + s] = token_types > 1 && s >= length / 2 && s < length;
    }
    if (positive) d.ids.i32()[i * S + 1 + int64_t(rng() % uint64_t(length - 1))] = 7;
    d.labels.i32()[i] = positive;
  }
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  std::string weights, mesh = "data=2,model=2";
  int epochs = 6;
  double expect = 0;  // fail (exit 1) below this held-out accuracy
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--weights")
      weights = value;
    else if (flag == "--mesh")
      mesh = value;
    else if (flag == "--epochs")
      epochs = std::stoi(value);
    else if (flag == "--expect-accuracy")
      expect = std::stod(value);
    else {
      std::fprintf(stderr, "unknown flag %s (--weights DIR, --mesh M, --epochs N)\n", argv[i]);
      return 2;
    }
  }
  try {
    BertConfig config;
    config.vocab_size = 64, config.hidden_size = 32, config.intermediate_size = 64;
    config.num_hidden_layers = 2, config.num_attention_heads = 4;
    config.max_position_embeddings = 32, config.num_labels = 2;
    if (!weights.empty()) config = bert_config_of(weights);
    const int64_t S =
        std::min<int64_t>(16, config.max_position_embeddings - config.position_offset());
    Bert model(config, S, /*seed=*/1);
    model.set_distribution(std::make_shared<AutoShard>(DeviceMesh::parse(mesh), "data"));
    if (!weights.empty()) load_bert_weights(model, weights);
    model.compile(AdamW({.learning_rate = 2e-3, .weight_decay = 0.01}),
                  losses::sparse_categorical_crossentropy, {metrics::accuracy()});

    const Data train = make_data(256, S, config.vocab_size, config.type_vocab_size, 1);
    const Data held_out = make_data(64, S, config.vocab_size, config.type_vocab_size, 2);
    const History h = model.fit(train.inputs(), train.labels,
                                {.batch_size = 32, .epochs = epochs, .verbose = false});
    for (int e = 0; e < epochs; ++e)
      std::printf("epoch %2d  loss %.4f  accuracy %.3f\n", e + 1, h.loss[e],
                  h.metrics.at("accuracy")[e]);
    const Logs test = model.evaluate_with_metrics(held_out.inputs(), held_out.labels);
    std::printf("held out on %s: loss %.4f  accuracy %.3f\n", mesh.c_str(), test.at("loss"),
                test.at("accuracy"));
    return test.at("accuracy") >= expect ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "bert_classifier: %s\n", e.what());
    return 1;
  }
}
