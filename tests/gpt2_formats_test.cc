// GPT-2 in the formats the field shares: a Hugging Face checkpoint written by
// PyTorch (tools/make_hf_gpt2_reference.py) gives PyTorch's logits on one
// device and on meshes; exports round-trip through Hugging Face's layout and
// llm.c's; bad files are errors naming the tensor.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "autoshard/error.h"
#include "autoshard/io/safetensors.h"
#include "autoshard/models/gpt2/formats.h"
#include "test_util.h"

namespace autoshard {
namespace {

namespace fs = std::filesystem;
const std::string kHf = std::string(AUTOSHARD_TEST_DATA) + "/hf_gpt2";
const std::string kLogits = std::string(AUTOSHARD_TEST_DATA) + "/hf_gpt2_logits.safetensors";

using Formats = testing::TempDirTest;

Tensor logits_of(const std::string& weights, const std::string& mesh = "") {
  SafetensorsFile ref(kLogits);
  Tensor x = ref.load("x");
  GPT2 model(gpt2_config_of(weights), x.dim(1));
  if (!mesh.empty()) model.set_distribution(std::make_shared<AutoShard>(DeviceMesh::parse(mesh)));
  load_gpt2_weights(model, weights);
  return model.predict_on_batch(x);
}

TEST_F(Formats, HuggingFaceCheckpointGivesPyTorchLogits) {
  const Tensor want = SafetensorsFile(kLogits).load("logits");
  EXPECT_LT(max_relative_error(logits_of(kHf), want), 1e-5);
  for (const char* mesh : {"model=2", "model=5", "data=2,model=3"})
    EXPECT_LT(max_relative_error(logits_of(kHf, mesh), want), 1e-5) << mesh;
}

TEST_F(Formats, HuggingFaceExportRoundTrips) {
  GPT2 model(gpt2_config_of(kHf), 10);
  model.set_distribution(std::make_shared<AutoShard>(DeviceMesh::parse("model=3")));
  load_gpt2_weights(model, kHf);
  save_hf_gpt2(model, (dir_ / "out").string());
  SafetensorsFile out((dir_ / "out" / "model.safetensors").string());
  EXPECT_FALSE(out.contains("lm_head.weight"));
  const Tensor bias = out.load("h.0.attn.c_attn.bias");
  for (int i = 24; i < 48; ++i)
    EXPECT_EQ(bias.f32()[i], 0.0f) << "the key bias is written as zeros";
  SafetensorsFile in(kHf + "/model.safetensors");
  EXPECT_EQ(max_abs_diff(out.load("h.1.attn.c_attn.weight"),
                         in.load("transformer.h.1.attn.c_attn.weight")),
            0.0);
  EXPECT_LT(max_relative_error(logits_of((dir_ / "out").string()),
                               SafetensorsFile(kLogits).load("logits")),
            1e-5);
}

TEST_F(Formats, LlmcRoundTripsAndConverts) {
  GPT2 model(gpt2_config_of(kHf), 10);
  load_gpt2_weights(model, kHf);
  const std::string bin = (dir_ / "model.bin").string();
  save_llmc_gpt2(model, bin);
  std::ifstream in(bin, std::ios::binary);
  int32_t header[8];
  in.read(reinterpret_cast<char*>(header), sizeof header);
  EXPECT_EQ(header[0], 20240326);
  EXPECT_EQ(header[1], 3);
  EXPECT_EQ(header[7], 128);  // padded vocabulary
  GPT2Config c = gpt2_config_of(bin);
  EXPECT_EQ(c.n_embd, 24);
  GPT2 back(c, 10);
  load_gpt2_weights(back, bin);
  for (const std::string& p : model.weight_paths())
    EXPECT_EQ(max_abs_diff(back.gather_weight(p), model.gather_weight(p)), 0.0) << p;
  // The command line converts between the formats.
  const std::string cmd =
      std::string(AUTOSHARD_CLI) + " convert " + bin + " " + (dir_ / "hf").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_LT(max_relative_error(logits_of((dir_ / "hf").string()),
                               SafetensorsFile(kLogits).load("logits")),
            1e-5);
}

TEST_F(Formats, BadFilesNameTheTensor) {
  GPT2 model(gpt2_config_of(kHf), 10);
  const Tensor before = model.gather_weight("wte.embeddings");
  // A config that does not match the file.
  GPT2 wider(
      GPT2Config{.n_layer = 2, .n_head = 3, .n_embd = 30, .vocab_size = 67, .n_positions = 16}, 10);
  try {
    load_gpt2_weights(wider, kHf);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("transformer."), std::string::npos) << e.what();
  }
  // An extra tensor from another architecture.
  {
    SafetensorsFile in(kHf + "/model.safetensors");
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const auto& e : in.entries()) tensors.emplace_back(e.name, in.load(e.name));
    tensors.emplace_back("transformer.h.0.crossattention.q_attn.weight", Tensor({2, 2}));
    fs::create_directories(dir_ / "extra");
    fs::copy_file(kHf + "/config.json", dir_ / "extra" / "config.json");
    save_safetensors((dir_ / "extra" / "model.safetensors").string(), tensors);
  }
  EXPECT_THROW(load_gpt2_weights(model, (dir_ / "extra").string()), Error);
  // A truncated llm.c file.
  save_llmc_gpt2(model, (dir_ / "m.bin").string());
  fs::resize_file(dir_ / "m.bin", fs::file_size(dir_ / "m.bin") - 64);
  try {
    load_gpt2_weights(model, (dir_ / "m.bin").string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a truncated or corrupt llm.c file"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(max_abs_diff(model.gather_weight("wte.embeddings"), before), 0.0)
      << "nothing half-loaded";
}

}  // namespace
}  // namespace autoshard
