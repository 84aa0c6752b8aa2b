// Times the GPT-2 training step (forward, backward, AdamW) on this process.
// Prints a readable table on stderr and one JSON object on stdout.
//
//   bench_gpt2_step [--model gpt2] [--batch 4] [--seq 64] [--steps 5] [--warmup 2] [--profile]
//                   [--mesh model=2] [--plan auto|megatron|data] [--zero1]

#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "autoshard/comm/world.h"
#include "autoshard/io/token_data.h"
#include "autoshard/ir/blas_core.h"
#include "autoshard/models/gpt2/gpt2.h"
#include "autoshard/nn/losses.h"

using namespace autoshard;

int main(int argc, char** argv) {
  blas::use_best_blas_kernels(argv);  // as the CLI: the best kernels for the CPU
  std::string model_name = "gpt2";
  int64_t batch = 4, seq = 64, steps = 5, warmup = 2;
  bool profile = false;
  std::string mesh_spec, plan = "auto";
  bool zero1 = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (a == "--model")
      model_name = next();
    else if (a == "--batch")
      batch = std::stoll(next());
    else if (a == "--seq")
      seq = std::stoll(next());
    else if (a == "--steps")
      steps = std::stoll(next());
    else if (a == "--warmup")
      warmup = std::stoll(next());
    else if (a == "--profile")
      profile = true;
    else if (a == "--mesh")
      mesh_spec = next();
    else if (a == "--plan")
      plan = next();
    else if (a == "--zero1")
      zero1 = true;
    else {
      std::fprintf(stderr,
                   "unknown argument %s (see the comment at the top of bench/gpt2_step.cc)\n",
                   a.c_str());
      return 2;
    }
  }
  GPT2Config cfg = GPT2Config::preset(model_name);
  GPT2 model(cfg, seq, 0);
  if (!mesh_spec.empty()) {
    DeviceMesh mesh = DeviceMesh::parse(mesh_spec);
    std::shared_ptr<Distribution> dist;
    if (plan == "megatron")
      dist = std::make_shared<ModelParallel>(mesh, gpt2_megatron_layout());
    else if (plan == "data")
      dist = std::make_shared<DataParallel>(mesh);
    else
      dist = std::make_shared<AutoShard>(mesh);
    dist->zero1 = zero1;
    model.set_distribution(dist);
  }
  model.compile(AdamW({.learning_rate = 1e-4}), losses::sparse_categorical_crossentropy);
  TokenData data = TokenData::builtin();
  Tensor x, y;
  for (int64_t s = 0; s < warmup; ++s) {
    data.batch(s, batch, seq, x, y);
    model.train_on_batch(x, y);
  }
  OpProfile prof;
  if (profile) model.profile = &prof;
  std::vector<double> times;
  for (int64_t s = 0; s < steps; ++s) {
    data.batch(warmup + s, batch, seq, x, y);
    auto t0 = std::chrono::steady_clock::now();
    model.train_on_batch(x, y);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  if (!World::process().leader()) {
    World::process().finalize();
    return 0;
  }
  const double median = times[times.size() / 2];
  const double flops = 6.0 * double(model.count_params()) * double(batch * seq);
  std::fprintf(stderr,
               "autoshard %s step on %s, B=%lld T=%lld: median %.3f s over %lld steps (min %.3f), "
               "%.0f tok/s, %.1f GFLOP/s (6 N tokens)\n",
               model_name.c_str(), mesh_spec.empty() ? "1 device" : mesh_spec.c_str(),
               (long long)batch, (long long)seq, median, (long long)steps, times.front(),
               double(batch * seq) / median, flops / median * 1e-9);
  if (profile) std::fprintf(stderr, "%s", prof.table().c_str());
  nlohmann::json j{{"engine", "autoshard"},
                   {"model", model_name},
                   {"mesh", mesh_spec.empty() ? "1 device" : mesh_spec},
                   {"batch", batch},
                   {"seq", seq},
                   {"params", model.count_params()},
                   {"steps", steps},
                   {"median_step_s", median},
                   {"min_step_s", times.front()},
                   {"step_s", times},  // sorted
                   {"tokens_per_second", double(batch * seq) / median}};
  if (World::process().distributed()) j["mesh"] = mesh_spec + " (MPI ranks)";
  std::printf("%s\n", j.dump().c_str());
  World::process().finalize();
}
