// Timelines for Perfetto (runtime/timeline.h, plan/predicted_timeline.h): a
// measured trace is valid Trace Event Format (slices closed, ordered and
// apart on each track, one track per device, the ops' time within 10% of the
// step that ran them), records only the steps asked for, and costs nothing
// when off; a predicted trace spans exactly the prediction; both reach the
// command line.
#include "autoshard/runtime/timeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "autoshard/error.h"
#include "autoshard/models/gpt2/gpt2.h"
#include "autoshard/nn/layers.h"
#include "autoshard/nn/model.h"
#include "autoshard/plan/cost_model.h"
#include "autoshard/plan/distribution.h"
#include "autoshard/plan/predicted_timeline.h"
#include "autoshard/runtime/overlap.h"
#include "cli_runner.h"
#include "test_util.h"

namespace autoshard {
namespace {

using nlohmann::json;

// Checks the Trace Event Format rules a viewer relies on and returns the
// complete slices ("X") by track id.
std::map<int, std::vector<json>> slices_by_track(const json& doc) {
  std::map<int, std::vector<json>> tracks;
  EXPECT_TRUE(doc.contains("traceEvents") && doc["traceEvents"].is_array());
  for (const json& e : doc["traceEvents"]) {
    const std::string ph = e.at("ph").get<std::string>();
    EXPECT_TRUE(ph == "X" || ph == "M" || ph == "C") << e.dump();
    EXPECT_TRUE(e.contains("pid") && e.contains("name")) << e.dump();
    if (ph != "X") continue;
    EXPECT_GE(e.at("dur").get<double>(), 0) << e.dump();  // a complete event is closed
    tracks[e.at("tid").get<int>()].push_back(e);
  }
  for (auto& [tid, list] : tracks) {
    // In the order written, each slice starts after the previous one ended
    // (slices on one track are a device's ops in the order they ran).
    for (size_t k = 1; k < list.size(); ++k) {
      const double end = list[k - 1]["ts"].get<double>() + list[k - 1]["dur"].get<double>();
      EXPECT_GE(list[k]["ts"].get<double>(), end - 1e-3)
          << "track " << tid << ": " << list[k - 1].dump() << " then " << list[k].dump();
    }
  }
  return tracks;
}

std::set<std::string> track_names(const json& doc) {
  std::set<std::string> names;
  for (const json& e : doc["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name") names.insert(e["args"]["name"]);
  return names;
}

// A 2-layer MLP big enough that its products, not the loop around them, fill a step.
std::unique_ptr<Sequential> mlp() {
  auto m = std::make_unique<Sequential>(
      Input({512}), std::vector<Layer>{Dense(512, DenseOptions().activation("relu")), Dense(10)});
  m->compile(Adam(), losses::sparse_categorical_crossentropy);
  return m;
}

TEST(Trace, MeasuredStepsAreValidAndTheirOpsFillTheStep) {
  auto model = mlp();
  const Tensor x = testing::random_tensor({256, 512}, 1), y = testing::random_ids({256}, 10, 2);
  TimelineRecorder timeline(parse_timeline_steps("2:6"));
  {
    TimelineScope scope(timeline);
    for (int s = 0; s < 7; ++s) model->train_on_batch(x, y);
  }
  EXPECT_EQ(timeline.runs(), 5) << "steps 2 to 6 only";
  const json doc = timeline.document().to_json();
  auto tracks = slices_by_track(doc);
  ASSERT_EQ(tracks[kStepsTrack].size(), 5u);
  EXPECT_EQ(tracks[kStepsTrack][0]["name"], "step 2");
  EXPECT_TRUE(track_names(doc).count("device 0"));
  // The ops of each step against the step's own slice: inside it, and
  // filling it but for the loop around them (the best step is judged: on a
  // loaded machine a step may lose its core between two ops).
  const std::vector<json>& ops = tracks[device_track(0)];
  ASSERT_FALSE(ops.empty());
  double best = 0;
  for (const json& step : tracks[kStepsTrack]) {
    const double begin = step["ts"], end = begin + step["dur"].get<double>();
    double busy = 0;
    for (const json& op : ops)
      if (op["ts"].get<double>() >= begin && op["ts"].get<double>() <= end) {
        busy += op["dur"].get<double>();
        EXPECT_LE(op["ts"].get<double>() + op["dur"].get<double>(), end + 1e-3);
      }
    EXPECT_LE(busy, step["dur"].get<double>() + 1e-3);
    best = std::max(best, busy / step["dur"].get<double>());
  }
  EXPECT_GT(best, 0.9) << "the ops of no step fill 90% of it";
  // Slices name op and layer and carry shapes and FLOPs; memory is a counter.
  bool einsum = false, counter = false;
  for (const json& op : ops)
    if (op["name"].get<std::string>().rfind("einsum ", 0) == 0) {
      einsum = true;
      EXPECT_TRUE(op["args"].contains("flops")) << op.dump();
    }
  for (const json& e : doc["traceEvents"]) counter |= e["ph"] == "C";
  EXPECT_TRUE(einsum);
  EXPECT_TRUE(counter);
}

TEST(Trace, EveryDeviceOfAMeshHasItsTrack) {
  GPT2 model(GPT2Config::preset("test"), 6, 11);
  // Megatron's layout: collectives on the device's own track (AutoShard may
  // keep data parallelism, whose buckets run on the lane).
  model.set_distribution(
      std::make_shared<ModelParallel>(DeviceMesh::parse("data=2,model=2"), gpt2_megatron_layout()));
  model.compile(AdamW(), losses::sparse_categorical_crossentropy);
  TimelineRecorder timeline;
  {
    TimelineScope scope(timeline);
    model.train_on_batch(testing::random_ids({4, 6}, 67, 3), testing::random_ids({4, 6}, 67, 4));
  }
  const json doc = timeline.document().to_json();
  auto tracks = slices_by_track(doc);
  for (int d = 0; d < 4; ++d) {
    EXPECT_TRUE(track_names(doc).count("device " + std::to_string(d))) << d;
    EXPECT_FALSE(tracks[device_track(d)].empty()) << d;
  }
  bool collective = false;
  for (const json& op : tracks[device_track(0)])
    if (op["cat"] == "collective") {
      collective = true;
      EXPECT_TRUE(op["args"].contains("axis")) << op.dump();
    }
  EXPECT_TRUE(collective) << "a data=2,model=2 step has collectives";
}

// Gradient buckets reduced on the communication lane get a track of their
// own per device, their slices in order and inside the step.
TEST(Trace, TheCommunicationLaneHasItsTrack) {
  const OverlapOptions saved = overlap_options();
  set_overlap_options({true, int64_t{16} << 10});  // several buckets
  auto model = mlp();
  model->set_distribution(std::make_shared<DataParallel>(DeviceMesh::parse("data=2")));
  TimelineRecorder timeline;
  {
    TimelineScope scope(timeline);
    model->train_on_batch(testing::random_tensor({256, 512}, 1), testing::random_ids({256}, 10, 2));
  }
  set_overlap_options(saved);
  const json doc = timeline.document().to_json();
  auto tracks = slices_by_track(doc);
  const json& step = tracks[kStepsTrack].at(0);
  for (int d = 0; d < 2; ++d) {
    EXPECT_TRUE(track_names(doc).count(lane_track_name(d))) << d;
    const std::vector<json>& lane = tracks[lane_track(d)];
    ASSERT_GE(lane.size(), 2u) << "device " << d;
    for (const json& s : lane) {
      EXPECT_EQ(s["name"], kBucketSliceName);
      EXPECT_GE(s["ts"].get<double>(), step["ts"].get<double>() - 1e-3);
      EXPECT_LE(s["ts"].get<double>() + s["dur"].get<double>(),
                step["ts"].get<double>() + step["dur"].get<double>() + 1e-3);
      EXPECT_GT(s["args"]["bytes"].get<double>(), 0);
    }
  }
}

TEST(Trace, NothingIsRecordedWithoutATracer) {
  auto model = mlp();
  TimelineRecorder timeline;
  model->train_on_batch(testing::random_tensor({256, 512}, 1), testing::random_ids({256}, 10, 2));
  EXPECT_EQ(timeline.runs(), 0);
  EXPECT_EQ(active_timeline(), nullptr);
}

// Scopes that end out of order (two Python context managers, say) remove
// only themselves: a destroyed timeline is never left active.
TEST(Trace, ScopesThatEndOutOfOrderRemoveOnlyThemselves) {
  TimelineRecorder a, b;
  auto outer = std::make_unique<TimelineScope>(a);
  auto inner = std::make_unique<TimelineScope>(b);
  EXPECT_EQ(active_timeline(), &b);
  outer.reset();
  EXPECT_EQ(active_timeline(), &b);
  inner.reset();
  EXPECT_EQ(active_timeline(), nullptr);
}

TEST(Trace, StepRangesParseOrSayWhatIsWrong) {
  EXPECT_EQ(parse_timeline_steps("3").first, 3);
  EXPECT_EQ(parse_timeline_steps("3").last, 3);
  EXPECT_EQ(parse_timeline_steps("2:").last, INT64_MAX);
  EXPECT_EQ(parse_timeline_steps(":4").first, 1);
  for (const char* bad : {"", ":", "0", "5:2", "a:b", "1:2:3", "-1"})
    EXPECT_THROW(parse_timeline_steps(bad), Error) << bad;
  EXPECT_EQ(timeline_file_of_rank("run.json", 1, true), "run.rank1.json");
  EXPECT_EQ(timeline_file_of_rank("run.json", 1, false), "run.json");
}

// The predicted timeline is the prediction: each device's last span ends at
// its predicted step, the steps slice spans the slowest device, and the
// ops on a device's track follow one another.
TEST(Trace, PredictedTimelineSpansThePrediction) {
  GPT2 model(GPT2Config::preset("test"), 6, 11);
  for (const char* mesh : {"data=2", "data=2,model=2", "model=3"}) {
    model.set_distribution(std::make_shared<AutoShard>(DeviceMesh::parse(mesh)));
    model.compile(AdamW(), losses::sparse_categorical_crossentropy);
    std::vector<int> every_device(size_t(DeviceMesh::parse(mesh).size()));
    std::iota(every_device.begin(), every_device.end(), 0);
    const Partition p = model.plan_training({4, 6}, {4, 6}, DType::I32, every_device);
    for (const char* cluster : {"cpu", "a100-80g"}) {
      const Cluster c = Cluster::named(cluster);
      const TimelineDocument doc = predicted_timeline(p, c, {});
      const json j = doc.to_json();
      auto tracks = slices_by_track(j);
      double slowest = 0;
      for (int d = 0; d < p.mesh.size(); ++d) {
        EXPECT_TRUE(track_names(j).count("device " + std::to_string(d))) << mesh << ", " << d;
        const StepPrediction pred = predict(p, c, {}, d);
        slowest = std::max(slowest, pred.step_s);
        double last = 0;
        for (int tid : {device_track(d), lane_track(d)})
          for (const json& s : tracks[tid])
            last = std::max(last, s["ts"].get<double>() + s["dur"].get<double>());
        EXPECT_NEAR(last, pred.step_s * 1e6, 1e-6 * pred.step_s * 1e6 + 1e-6)
            << mesh << " on " << cluster << ", device " << d;
      }
      ASSERT_EQ(tracks[kStepsTrack].size(), 1u);
      EXPECT_NEAR(tracks[kStepsTrack][0]["dur"].get<double>(), slowest * 1e6, 1e-6 * slowest * 1e6);
    }
  }
}

// The 2-core machine's cluster with more devices than cores: the stretches
// the cost model times as a whole are shared by their ops.
TEST(Trace, PredictedTimelineOfDevicesSharingCores) {
  GPT2 model(GPT2Config::preset("test"), 6, 11);
  model.set_distribution(std::make_shared<AutoShard>(DeviceMesh::parse("data=2,model=4")));
  model.compile(AdamW(), losses::sparse_categorical_crossentropy);
  const Partition p = model.plan_training({4, 6}, {4, 6});
  Cluster c = Cluster::named("cpu");  // as `autoshard calibrate` measures a 2-core machine
  c.shared_cores = 2;
  c.oversubscribed_slice = 2e-4;
  c.oversubscribed_wait = 1e-5;
  ASSERT_TRUE(c.oversubscribed(p.mesh.size()));
  const StepPrediction pred = predict(p, c, {});
  auto tracks = slices_by_track(predicted_timeline(p, c, {}).to_json());
  double last = 0, busy = 0;
  for (const json& s : tracks[device_track(0)]) {
    last = std::max(last, s["ts"].get<double>() + s["dur"].get<double>());
    busy += s["dur"].get<double>();
  }
  EXPECT_NEAR(last, pred.step_s * 1e6, 1e-6 * pred.step_s * 1e6);
  EXPECT_NEAR(busy, (pred.compute_s + pred.communication_s) * 1e6, 1e-6 * pred.step_s * 1e6 + 1e-6);
}

TEST(Trace, CommandsWriteBothTimelines) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("trace_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string measured = (dir / "measured.json").string();
  const std::string predicted = (dir / "predicted.json").string();
  auto r = cli_runner::run(
      "train --model tiny --batch 4 --seq 16 --steps 3 --sample 0 --mesh "
      "data=2 --trace " +
      measured + " --trace-steps 2:3");
  ASSERT_EQ(r.code, 0) << r.output;
  r = cli_runner::run("plan --model tiny --batch 4 --seq 16 --mesh data=2 --predict --trace " +
                      predicted);
  ASSERT_EQ(r.code, 0) << r.output;
  for (const std::string& path : {measured, predicted}) {
    std::ifstream in(path);
    const json doc = json::parse(in);
    slices_by_track(doc);
    EXPECT_TRUE(track_names(doc).count("device 0")) << path;
    EXPECT_TRUE(track_names(doc).count("device 1")) << path;
  }
  std::ifstream in(measured);
  const json doc = json::parse(in);
  int steps = 0;
  for (const json& e : doc["traceEvents"]) steps += e["ph"] == "X" && e["cat"] == "step";
  EXPECT_EQ(steps, 2);
  // Bad use: one line each.
  r = cli_runner::run("plan --model tiny --mesh data=2 --trace " + (dir / "x.json").string());
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("needs --predict"), std::string::npos) << r.output;
  r = cli_runner::run("train --model tiny --steps 1 --trace-steps 1:2");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("--trace-steps needs --trace"), std::string::npos) << r.output;
  r = cli_runner::run("train --model tiny --steps 1 --sample 0 --trace " + measured);
  EXPECT_EQ(r.code, 1) << "an existing file is kept";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace autoshard
