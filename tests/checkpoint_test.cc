// Checkpoints: sharded saves into standard safetensors, resuming bitwise on
// the same mesh and within float tolerance on another, atomic replacement,
// retention, and clear errors that leave the model untouched.
#include "autoshard/io/checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "autoshard/error.h"
#include "autoshard/models/gpt2/gpt2.h"
#include "test_util.h"

namespace autoshard {
namespace {

namespace fs = std::filesystem;

using Checkpoints = testing::TempDirTest;

// `plan`: a distribution shared with other models (one plan for all), else
// a new AutoShard on `mesh` (none: one device).
std::unique_ptr<GPT2> make_model(const std::string& mesh,
                                 std::shared_ptr<Distribution> plan = nullptr) {
  auto m = std::make_unique<GPT2>(GPT2Config::preset("test"), 6, 11);
  if (!plan && !mesh.empty()) plan = std::make_shared<AutoShard>(DeviceMesh::parse(mesh));
  if (plan) m->set_distribution(plan);
  m->compile(AdamW({.learning_rate = 1e-2, .epsilon = 1e-3, .clipnorm = 1.0}),
             losses::sparse_categorical_crossentropy);
  return m;
}

double step(GPT2& m, int s) {
  return m.train_on_batch(testing::random_ids({6, 6}, 67, 500 + s),
                          testing::random_ids({6, 6}, 67, 900 + s));
}

TEST_F(Checkpoints, ResumeIsBitwiseOnTheSameMeshAndCloseOnAnother) {
  // Bitwise needs the same program: the three runs on model=2 share one
  // AutoShard plan (a time-limited search may end differently each time).
  const auto plan = std::make_shared<AutoShard>(DeviceMesh::parse("model=2"));
  auto full = make_model("model=2", plan);
  std::vector<double> want;
  for (int s = 0; s < 6; ++s) want.push_back(step(*full, s));

  auto first = make_model("model=2", plan);
  for (int s = 0; s < 3; ++s) step(*first, s);
  save_checkpoint(*first, (dir_ / "ck").string(), {{"data_position", 3}});

  auto same = make_model("model=2", plan);
  nlohmann::json state = load_checkpoint(*same, (dir_ / "ck").string());
  EXPECT_EQ(state["step"].get<int>(), 3);
  EXPECT_EQ(state["data_position"].get<int>(), 3);
  EXPECT_EQ(same->iterations(), 3);
  for (int s = 3; s < 6; ++s) EXPECT_EQ(step(*same, s), want[s]) << "bitwise, step " << s;

  auto other = make_model("data=2,model=3");
  load_checkpoint(*other, (dir_ / "ck").string());
  for (int s = 3; s < 6; ++s)
    EXPECT_NEAR(step(*other, s), want[s], 1e-5 * want[s]) << "resharded, step " << s;

  auto single = make_model("");
  load_checkpoint(*single, (dir_ / "ck").string());
  for (int s = 3; s < 6; ++s)
    EXPECT_NEAR(step(*single, s), want[s], 1e-5 * want[s]) << "one device, step " << s;
}

TEST_F(Checkpoints, SavedFilesAreStandardSafetensorsOfWholeTensors) {
  auto m = make_model("data=2,model=3");
  step(*m, 0);
  save_checkpoint(*m, (dir_ / "ck").string(), {});
  SafetensorsFile f((dir_ / "ck" / "model.safetensors").string());
  for (const std::string& path : m->weight_paths()) {
    ASSERT_TRUE(f.contains(path)) << path;
    EXPECT_EQ(max_abs_diff(f.load(path), m->gather_weight(path)), 0.0) << path;
  }
  SafetensorsFile opt((dir_ / "ck" / "optimizer.safetensors").string());
  EXPECT_TRUE(opt.contains("optimizer.m.wte.embeddings"));
  EXPECT_EQ(max_abs_diff(opt.load("optimizer.v.h.0.mlp.c_fc.kernel"),
                         m->gather_weight("optimizer.v.h.0.mlp.c_fc.kernel")),
            0.0);
}

TEST_F(Checkpoints, BadCheckpointsAreErrorsAndLeaveTheModelUntouched) {
  auto m = make_model("model=2");
  step(*m, 0);
  save_checkpoint(*m, (dir_ / "ck").string(), {});
  auto other = make_model("model=2");
  step(*other, 1);
  const Tensor before = other->gather_weight("wte.embeddings");
  // Truncated weights file.
  fs::copy(dir_ / "ck", dir_ / "cut", fs::copy_options::recursive);
  fs::resize_file(dir_ / "cut" / "model.safetensors",
                  fs::file_size(dir_ / "cut" / "model.safetensors") - 100);
  EXPECT_THROW(load_checkpoint(*other, (dir_ / "cut").string()), Error);
  EXPECT_EQ(max_abs_diff(other->gather_weight("wte.embeddings"), before), 0.0);
  // Another architecture: a GPT-2 of different width.
  GPT2 wide(
      GPT2Config{.n_layer = 2, .n_head = 3, .n_embd = 30, .vocab_size = 67, .n_positions = 16}, 6);
  wide.compile(AdamW(), losses::sparse_categorical_crossentropy);
  try {
    load_checkpoint(wide, (dir_ / "ck").string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("another model size or architecture"), std::string::npos)
        << e.what();
  }
  // Not a checkpoint at all.
  fs::create_directories(dir_ / "empty");
  EXPECT_THROW(load_checkpoint(*other, (dir_ / "empty").string()), Error);
  EXPECT_EQ(max_abs_diff(other->gather_weight("wte.embeddings"), before), 0.0);
}

TEST_F(Checkpoints, ManagerKeepsTheLastKAndSavesInTheBackground) {
  auto m = make_model("model=2");
  CheckpointManager manager({.directory = dir_.string(), .save_every = 2, .keep = 2});
  for (int s = 1; s <= 7; ++s) {
    step(*m, s);
    manager.maybe_save(*m, m->iterations(), {{"data_position", s}});
  }
  manager.wait_until_finished();
  EXPECT_EQ(manager.steps(), (std::vector<int64_t>{4, 6}));
  auto back = make_model("model=2");
  nlohmann::json st = manager.restore(*back);
  EXPECT_EQ(st["step"].get<int>(), 6);
  EXPECT_EQ(st["data_position"].get<int>(), 6);
}

TEST_F(Checkpoints, ManagerKeepsTheBestByAMetricAndTheLatest) {
  auto m = make_model("");
  CheckpointManager manager({.directory = dir_.string(),
                             .keep = 1,
                             .monitor = "loss",
                             .mode = "min",
                             .background = false});
  const double losses[] = {3.0, 1.0, 2.0, 4.0};
  for (int s = 0; s < 4; ++s) manager.save(*m, s + 1, {}, {{"loss", losses[s]}});
  EXPECT_EQ(manager.steps(), (std::vector<int64_t>{2, 4}));  // best (loss 1) and latest
}

}  // namespace
}  // namespace autoshard
