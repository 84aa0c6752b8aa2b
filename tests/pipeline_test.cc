// Pipeline parallelism executed: GPT-2 and Llama cut into 2, 3 and 4 stages
// (uneven blocks per stage, uneven micro-batches), under GPipe and 1F1B,
// with dropout and gradient clipping, regularizers and constraints, give one
// device's full-batch losses and weights over several AdamW steps; each stage holds no more
// micro-batches than its schedule's bound; the schedules themselves are checked whole.
#include "autoshard/nn/pipeline.h"

#include <cblas.h>
#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "autoshard/error.h"
#include "autoshard/models/gpt2/gpt2.h"
#include "autoshard/models/llama/llama.h"
#include "autoshard/nn/losses.h"
#include "autoshard/nn/regularizers.h"
#include "autoshard/optim/optimizers.h"
#include "autoshard/plan/distribution.h"
#include "autoshard/shard/partitioner.h"
#include "small_models.h"
#include "test_util.h"

namespace autoshard {
namespace {

// Every pass of every device once, its forward before its backward, in an
// order buffered sends and blocking receives complete: simulated, a device
// runs its next pass once its inputs exist (a forward pass needs the
// previous stage's, a backward pass the next stage's), and all finish. The
// most a device holds equals the bound.
TEST(PipeSchedules, EveryOrderCompletesWithinItsBound) {
  struct Shape {
    PipelineSchedule kind;
    int P, v;
    int64_t M;
  };
  std::vector<Shape> shapes;
  for (int P : {1, 2, 3, 4})
    for (int64_t M : {1, 2, 3, 4, 7, 8}) {
      shapes.push_back({PipelineSchedule::GPipe, P, 1, M});
      shapes.push_back({PipelineSchedule::OneFOneB, P, 1, M});
      for (int v : {2, 3})
        if (M % P == 0) shapes.push_back({PipelineSchedule::Interleaved, P, v, M});
    }
  for (const Shape& sh : shapes) {
    const std::string what = std::string(pipeline_schedule_name(sh.kind)) +
                             " P=" + std::to_string(sh.P) + " v=" + std::to_string(sh.v) +
                             " M=" + std::to_string(sh.M);
    const int V = sh.P * sh.v;
    std::vector<PipeWork> work;
    for (int d = 0; d < sh.P; ++d) {
      work.push_back(pipe_schedule({sh.P, sh.M, sh.v, sh.kind}, d));
      ASSERT_EQ(work.back().size(), size_t(2 * sh.M * sh.v)) << what;
    }
    std::set<std::tuple<char, int, int64_t>> done;
    std::vector<size_t> next(sh.P, 0);
    std::vector<int64_t> held(sh.P, 0), peak(sh.P, 0);
    for (bool moved = true; moved;) {
      moved = false;
      for (int d = 0; d < sh.P; ++d) {
        if (next[d] == work[d].size()) continue;
        const PipeUnit u = work[d][next[d]];
        ASSERT_EQ(u.stage % sh.P, d) << what;
        const bool ready =
            u.kind == 'F' ? u.stage == 0 || done.count({'F', u.stage - 1, u.microbatch})
                          : done.count({'F', u.stage, u.microbatch}) &&
                                (u.stage == V - 1 || done.count({'B', u.stage + 1, u.microbatch}));
        if (!ready) continue;
        ASSERT_TRUE(done.insert({u.kind, u.stage, u.microbatch}).second) << what << " twice";
        held[d] += u.kind == 'F' ? 1 : -1;
        peak[d] = std::max(peak[d], held[d]);
        ++next[d];
        moved = true;
      }
    }
    for (int d = 0; d < sh.P; ++d) {
      EXPECT_EQ(next[d], work[d].size()) << what << ": device " << d << " waits for ever";
      // The cost model's count (in micro-batches' worth of a stage) x v.
      EXPECT_EQ(peak[d], in_flight({sh.P, sh.M, sh.v, sh.kind}, d) * sh.v) << what << " " << d;
    }
  }
  EXPECT_EQ(in_flight({4, 8, 1, PipelineSchedule::OneFOneB}, 0), 4);
  EXPECT_EQ(in_flight({4, 8, 1, PipelineSchedule::GPipe}, 0), 8);
  EXPECT_EQ(pipe_schedule({4, 8, 2, PipelineSchedule::Interleaved}, 0).front(),
            (PipeUnit{'F', 0, 0}));
  EXPECT_EQ(pipe_schedule({4, 8, 2, PipelineSchedule::Interleaved}, 0)[4],
            (PipeUnit{'F', 4, 0}));  // the second chunk after a group of 4
}

std::shared_ptr<Optimizer> make_adamw() {
  // epsilon 1e-3: see partitioner_test.cc (gradients near Adam's epsilon
  // turn their rounding into whole steps).
  return AdamW({.learning_rate = 1e-2, .epsilon = 1e-3, .weight_decay = 0.1, .clipnorm = 0.5});
}

struct PipelineCase {
  std::string model;  // "gpt2", "gpt2-dropout" or "llama"
  int stages;
  int64_t microbatches, batch;
  PipelineSchedule schedule;
  std::string inside = "";  // the mesh inside each stage: "", "data=2", "model=2", "data=2,model=3"
  int virtual_stages = 1;   // stages per device (interleaved)
};

std::unique_ptr<Model> build_model(const std::string& which, int64_t seq) {
  if (which.starts_with("gpt2")) {
    GPT2Config cfg = GPT2Config::preset("test");
    cfg.n_layer = 5;
    if (which == "gpt2-dropout") cfg.dropout = 0.2;
    return std::make_unique<GPT2>(cfg, seq, 11);
  }
  return std::make_unique<Llama>(testing::small_llama_config(), seq, 11);
}

// The layout inside the stages: data parallel without a model axis, else
// Megatron's.
std::shared_ptr<Distribution> inside(const PipelineCase& c) {
  const DeviceMesh mesh = DeviceMesh::parse(c.inside);
  if (mesh.axis_index("model") < 0) return std::make_shared<DataParallel>(mesh);
  return std::make_shared<ModelParallel>(
      mesh, c.model == "llama" ? llama_megatron_layout(testing::small_llama_config())
                               : gpt2_megatron_layout());
}

TEST(Pipeline, StagesGiveOneDevicesLossesAndWeights) {
  const int64_t T = 6, steps = 3;
  const std::vector<PipelineCase> cases = {
      {"gpt2", 2, 4, 4, PipelineSchedule::OneFOneB},  // 3 + 2 blocks
      {"gpt2", 3, 3, 5, PipelineSchedule::GPipe},     // 2 + 2 + 1 blocks, micro-batches 2, 2, 1
      {"gpt2", 4, 6, 6, PipelineSchedule::OneFOneB},  // 2 + 1 + 1 + 1
      {"gpt2-dropout", 2, 3, 6, PipelineSchedule::OneFOneB},
      {"llama", 2, 2, 4, PipelineSchedule::GPipe},
      {"llama", 3, 4, 5, PipelineSchedule::OneFOneB},  // 2 + 1 + 1, untied head
      // Other axes inside the stages: data=2,pipe=2, pipe=2,model=2, and an
      // uneven 2 x 3 mesh in each of 3 stages.
      {"gpt2", 2, 2, 6, PipelineSchedule::OneFOneB, "data=2"},
      {"gpt2-dropout", 2, 3, 5, PipelineSchedule::GPipe, "model=2"},
      {"llama", 2, 2, 4, PipelineSchedule::OneFOneB, "model=2"},
      {"gpt2", 3, 2, 4, PipelineSchedule::OneFOneB, "data=2,model=3"},
      // Interleaved: 2 devices x 2 virtual stages (5 blocks: 2 1 1 1), 4
      // micro-batches; and with model=2 inside.
      {"gpt2", 2, 4, 6, PipelineSchedule::Interleaved, "", 2},
      {"llama", 2, 2, 4, PipelineSchedule::Interleaved, "model=2", 2},
  };
  for (const PipelineCase& c : cases) {
    const std::string what = c.model + " " + c.inside + " pipe=" + std::to_string(c.stages) +
                             " M=" + std::to_string(c.microbatches) + " " +
                             pipeline_schedule_name(c.schedule);
    std::unique_ptr<Model> one = build_model(c.model, T), piped = build_model(c.model, T);
    one->compile(make_adamw(), losses::sparse_categorical_crossentropy);
    piped->compile(make_adamw(), losses::sparse_categorical_crossentropy);
    if (!c.inside.empty()) piped->set_distribution(inside(c));
    PipelineTrainer pipeline(*piped, {c.stages, c.microbatches, c.virtual_stages, c.schedule});
    const int32_t vocab = c.model == "llama" ? 61 : 67;
    for (int64_t step = 0; step < steps; ++step) {
      const Tensor x = testing::random_ids({c.batch, T}, vocab, 100 + step);
      const Tensor y = testing::random_ids({c.batch, T}, vocab, 200 + step);
      const double want = one->train_on_batch(x, y), got = pipeline.train_on_batch(x, y);
      EXPECT_NEAR(got, want, 1e-5 * std::fabs(want)) << what << " step " << step + 1;
    }
    EXPECT_EQ(piped->iterations(), steps);
    for (const std::string& path : one->weight_paths())
      EXPECT_LT(max_relative_error(piped->gather_weight(path), one->gather_weight(path)), 1e-4)
          << what << " " << path;
    // Micro-batches' gradients are summed where each device computes them:
    // a data axis reduces them once, in the update, never per micro-batch.
    for (int s = 0; s < c.stages * c.virtual_stages; ++s)
      for (const CollectiveRecord& r : pipeline.backward_collectives(s))
        EXPECT_FALSE(r.kind == "all_reduce" && r.axis == "data")
            << what << " stage " << s << " all-reduces " << r.value;
    for (int s = 0; s < c.stages; ++s)
      EXPECT_EQ(
          pipeline.peak_in_flight()[s],
          in_flight({c.stages, c.microbatches, c.virtual_stages, c.schedule}, s) * c.virtual_stages)
          << what << " stage " << s;
  }
}

// Stages are balanced by predicted time, not by block count: with a head
// (vocabulary 3000 over a width of 24) costing more than a block, the last
// stage holds fewer blocks than the first, and the numbers stay one
// device's.
TEST(Pipeline, StagesAreBalancedByTimeNotBlockCount) {
  GPT2Config cfg = GPT2Config::preset("test");
  cfg.n_layer = 8;
  cfg.vocab_size = 3000;
  GPT2 one(cfg, 6, 11), piped(cfg, 6, 11);
  one.compile(make_adamw(), losses::sparse_categorical_crossentropy);
  piped.compile(make_adamw(), losses::sparse_categorical_crossentropy);
  PipelineTrainer pipeline(piped, {2, 2, 1, PipelineSchedule::OneFOneB});
  for (int step = 0; step < 2; ++step) {
    const Tensor x = testing::random_ids({4, 6}, 3000, 500 + step);
    const Tensor y = testing::random_ids({4, 6}, 3000, 600 + step);
    // The head's products are large enough for OpenBLAS to split over its
    // own threads, whose synchronisation ThreadSanitizer cannot see: the
    // reference runs them on one (the stages set theirs, one each on 2 cores).
    openblas_set_num_threads(1);
    const double want = one.train_on_batch(x, y);
    const double got = pipeline.train_on_batch(x, y);
    EXPECT_NEAR(got, want, 1e-5 * std::fabs(want)) << "step " << step + 1;
  }
  ASSERT_EQ(pipeline.stage_blocks().size(), 2u);
  EXPECT_EQ(pipeline.stage_blocks()[0] + pipeline.stage_blocks()[1], 8);
  EXPECT_GT(pipeline.stage_blocks()[0], pipeline.stage_blocks()[1]);
}

// Batches of another size (9, then 8: micro-batches 3 3 3, then 3 3 2)
// take their own loss shares and dropout offsets, not the first batch's.
TEST(Pipeline, BatchesOfAnotherSizeTakeTheirOwnShares) {
  const int64_t T = 6;
  std::unique_ptr<Model> one = build_model("gpt2-dropout", T),
                         piped = build_model("gpt2-dropout", T);
  one->compile(make_adamw(), losses::sparse_categorical_crossentropy);
  piped->compile(make_adamw(), losses::sparse_categorical_crossentropy);
  PipelineTrainer pipeline(*piped, {2, 3, 1, PipelineSchedule::OneFOneB});
  int step = 0;
  for (int64_t batch : {9, 8, 9}) {
    const Tensor x = testing::random_ids({batch, T}, 67, 300 + step);
    const Tensor y = testing::random_ids({batch, T}, 67, 400 + step);
    const double want = one->train_on_batch(x, y), got = pipeline.train_on_batch(x, y);
    EXPECT_NEAR(got, want, 1e-5 * std::fabs(want)) << "batch " << batch << " step " << ++step;
  }
}

// AutoShard inside the stages: it plans the whole model's step on one
// micro-batch over the mesh inside (here with too little memory per device
// to keep every weight whole), and the stages take its weights' and state's
// layouts: one device's losses, weights split as AutoShard split them.
TEST(Pipeline, AutoShardLaysOutTheStages) {
  const int64_t T = 6, batch = 4, microbatches = 2;
  for (const std::string inside : {"model=2", "data=2,model=2"}) {
    std::unique_ptr<Model> one = build_model("gpt2", T), piped = build_model("gpt2", T);
    one->compile(make_adamw(), losses::sparse_categorical_crossentropy);
    piped->compile(make_adamw(), losses::sparse_categorical_crossentropy);
    const auto planner = std::make_shared<AutoShard>(
        DeviceMesh::parse(inside), "data",
        AutoShardOptions{.memory_per_device = 400 * 1024, .deterministic = true});
    piped->set_distribution(planner);
    EXPECT_THROW(PipelineTrainer(*piped, {2, microbatches, 1, PipelineSchedule::OneFOneB}),
                 Error);  // not planned yet
    const int64_t rows = batch / microbatches;
    piped->plan_training({rows, T}, {rows, T}, DType::I32);
    int split = 0;
    for (const auto& [path, layout] : planner->plan()) split += !layout.fully_replicated();
    EXPECT_GT(split, 0) << inside << ": AutoShard kept every weight whole";
    PipelineTrainer pipeline(*piped, {2, microbatches, 1, PipelineSchedule::OneFOneB});
    for (int64_t step = 0; step < 3; ++step) {
      const Tensor x = testing::random_ids({batch, T}, 67, 500 + step);
      const Tensor y = testing::random_ids({batch, T}, 67, 600 + step);
      const double want = one->train_on_batch(x, y), got = pipeline.train_on_batch(x, y);
      EXPECT_NEAR(got, want, 1e-5 * std::fabs(want)) << inside << " step " << step + 1;
    }
    for (const std::string& path : one->weight_paths())
      EXPECT_LT(max_relative_error(piped->gather_weight(path), one->gather_weight(path)), 1e-4)
          << inside << " " << path;
  }
}

// Keras's regularizers and constraints in stages: weight penalties (L1L2
// on block weights of both stages, L2 on ln_f after the last block,
// orthogonal on the position embedding before the first), L1/L2 activity
// penalties on layers of both stages, and constraints after the update
// (MaxNorm, NonNeg) give one device's losses and weights, on uneven
// micro-batches and with model=2 inside the stages.
void regularize(Model& m) {
  m.set_regularizers({{"h.0.mlp.c_fc.kernel", regularizers::l1_l2(1e-3, 1e-2)},
                      {"h.4.mlp.c_proj.bias", regularizers::l1_l2(0, 0.05)},
                      {"ln_f.gamma", regularizers::l1_l2(0, 0.02)},
                      {"wpe.embeddings", regularizers::orthogonal(0.05, true)}},
                     {{"h.1.mlp.c_fc", regularizers::l1_l2(2e-3, 0)},
                      {"h.4.mlp.c_proj", regularizers::l1_l2(0, 1e-2)}});
  m.set_constraints({{"h.1.mlp.c_proj.kernel", constraints::max_norm(0.05, {0})},
                     {"h.3.mlp.c_fc.bias", constraints::non_neg()}});
}

TEST(Pipeline, RegularizersAndConstraintsGiveOneDevicesSteps) {
  const int64_t T = 6, steps = 3;
  const std::vector<PipelineCase> cases = {
      {"gpt2", 2, 3, 5, PipelineSchedule::OneFOneB},  // micro-batches 2, 2, 1
      {"gpt2", 3, 2, 4, PipelineSchedule::GPipe, "model=2"},
  };
  for (const PipelineCase& c : cases) {
    const std::string what = c.inside + " pipe=" + std::to_string(c.stages);
    std::unique_ptr<Model> one = build_model("gpt2", T), piped = build_model("gpt2", T),
                           plain = build_model("gpt2", T);
    for (Model* m : {one.get(), piped.get(), plain.get()})
      m->compile(make_adamw(), losses::sparse_categorical_crossentropy);
    regularize(*one);
    regularize(*piped);
    if (!c.inside.empty()) piped->set_distribution(inside(c));
    PipelineTrainer pipeline(*piped, {c.stages, c.microbatches, 1, c.schedule});
    for (int64_t step = 0; step < steps; ++step) {
      const Tensor x = testing::random_ids({c.batch, T}, 67, 700 + step);
      const Tensor y = testing::random_ids({c.batch, T}, 67, 800 + step);
      const double want = one->train_on_batch(x, y), got = pipeline.train_on_batch(x, y);
      EXPECT_NEAR(got, want, 1e-5 * std::fabs(want)) << what << " step " << step + 1;
      // The penalties count: the same weights without them give less.
      if (step == 0) {
        EXPECT_GT(want - plain->train_on_batch(x, y), 0.05) << what;
      }
    }
    for (const std::string& path : one->weight_paths())
      EXPECT_LT(max_relative_error(piped->gather_weight(path), one->gather_weight(path)), 1e-5)
          << what << " " << path;
    // The constraints held after each update.
    const Tensor capped = piped->gather_weight("h.1.mlp.c_proj.kernel");
    const int64_t rows = capped.shape()[0], cols = capped.shape()[1];
    for (int64_t j = 0; j < cols; ++j) {
      double sq = 0;
      for (int64_t i = 0; i < rows; ++i) sq += std::pow(capped.f32()[i * cols + j], 2);
      EXPECT_LE(std::sqrt(sq), 0.05 + 1e-6) << what << " column " << j;
    }
    for (float v : piped->gather_weight("h.3.mlp.c_fc.bias").to_vector()) EXPECT_GE(v, 0.0f);
  }
}

// Penalties, constraints and freezing set on the model after the pipeline's
// first step are traced into its next one, as into the model's own steps
// (the stages' programs were compiled without them).
TEST(Pipeline, SettingsChangedAfterAStepAreTracedAgain) {
  const int64_t T = 6, B = 4;
  std::unique_ptr<Model> one = build_model("gpt2", T), piped = build_model("gpt2", T);
  for (Model* m : {one.get(), piped.get()})
    m->compile(make_adamw(), losses::sparse_categorical_crossentropy);
  PipelineTrainer pipeline(*piped, {2, 2, 1, PipelineSchedule::GPipe});
  for (int64_t step = 0; step < 4; ++step) {
    if (step == 1) {
      regularize(*one);
      regularize(*piped);
    }
    if (step == 2) {
      one->set_frozen({"h.0"});
      piped->set_frozen({"h.0"});
    }
    const Tensor x = testing::random_ids({B, T}, 67, 900 + step);
    const Tensor y = testing::random_ids({B, T}, 67, 950 + step);
    const double want = one->train_on_batch(x, y), got = pipeline.train_on_batch(x, y);
    EXPECT_NEAR(got, want, 1e-5 * std::fabs(want)) << "step " << step + 1;
  }
  for (const std::string& path : one->weight_paths())
    EXPECT_LT(max_relative_error(piped->gather_weight(path), one->gather_weight(path)), 1e-5)
        << path;
}

// An activity penalty that couples a batch's examples cannot be split into
// micro-batches: refused in one line (one micro-batch computes it whole).
TEST(Pipeline, CouplingActivityPenaltiesAreRefused) {
  std::unique_ptr<Model> m = build_model("gpt2", 6);
  m->compile(make_adamw(), losses::sparse_categorical_crossentropy);
  m->set_regularizers({}, {{"h.1.mlp.c_fc", regularizers::orthogonal(0.1, true)}});
  const Tensor x = testing::random_ids({4, 6}, 67, 1);
  PipelineTrainer two(*m, {2, 2, 1, PipelineSchedule::GPipe});
  const std::string error = testing::error_of([&] { two.train_on_batch(x, x); });
  EXPECT_NE(error.find("layer 'h.1.mlp.c_fc''s activity_regularizer couples the examples"),
            std::string::npos)
      << error;
}

TEST(Pipeline, ClearErrors) {
  std::unique_ptr<Model> m = build_model("gpt2", 6);
  EXPECT_THROW(PipelineTrainer(*m, {2, 2, 1, PipelineSchedule::GPipe}), Error);  // not compiled
  m->compile(make_adamw(), losses::sparse_categorical_crossentropy);
  PipelineTrainer six(*m, {6, 1, 1, PipelineSchedule::GPipe});  // 5 blocks
  const Tensor x = testing::random_ids({2, 6}, 67, 1);
  try {
    six.train_on_batch(x, x);
    ADD_FAILURE() << "6 stages of 5 blocks trained";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs at least 6 blocks but the model has 5"),
              std::string::npos)
        << e.what();
  }
  PipelineTrainer many(*m, {2, 3, 1, PipelineSchedule::GPipe});
  EXPECT_THROW(many.train_on_batch(x, x), Error);  // 3 micro-batches of 2 examples
}

}  // namespace
}  // namespace autoshard
