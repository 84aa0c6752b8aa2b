// The layers of the library (docs/architecture.md) include only downward:
// every #include in src/<layer>/ and include/autoshard/<layer>/ names a
// header of its own layer or of one it is allowed to depend on. CMake links
// the same graph (one library per layer); this test also catches includes of
// header-only code, which the linker cannot see. The code above the library
// (python/src, bench, C++ under tools) is held to the same table, and a
// layer's private headers (src/<layer>/*.h, included as "<layer>/...")
// are for that layer alone, except where kPrivateExceptions says why not.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

// Each layer and the layers it may use (what those use, it may use too:
// layers_allowed() closes the table).
const std::map<std::string, std::set<std::string>> kAllowed = {
    {"solver", {}},  // the IOPDDL solver core: the base only
    {"tensor", {}},
    {"comm", {"tensor"}},
    {"ir", {"tensor", "comm"}},
    {"shard", {"tensor", "ir"}},
    {"runtime", {"tensor", "comm", "ir", "shard"}},
    {"plan", {"tensor", "comm", "ir", "shard", "runtime", "solver"}},
    {"pages", {"plan"}},  // the report pages: a plan as a picture, training curves
    {"optim", {"tensor", "ir"}},
    {"nn", {"tensor", "comm", "ir", "shard", "runtime", "plan", "optim"}},
    {"io", {"tensor", "comm", "ir", "shard", "runtime", "plan", "optim", "nn"}},
    {"models", {"tensor", "comm", "ir", "shard", "runtime", "plan", "optim", "nn", "io"}},
    {"app", {"tensor", "comm", "ir", "shard", "runtime", "plan", "optim", "nn", "io", "models"}},
    {"cli", {"app", "pages"}},
    // Above the library: the Python extension (which compiles the CLI's
    // Keras progress display too), the benchmarks and the tools.
    {"python", {"cli"}},
    {"bench", {"app", "pages"}},
    {"tools", {"app", "pages"}},
};

// Where each part of the tree lives: a folder of layers (src/<layer>/,
// include/autoshard/<layer>/) or a folder that is one layer.
struct LayerRoot {
  const char* dir;
  const char* layer;  // nullptr: the first folder under `dir` names the layer
};
const LayerRoot kRoots[] = {{"src", nullptr},
                            {"include/autoshard", nullptr},
                            {"python/src", "python"},
                            {"bench", "bench"},
                            {"tools", "tools"}};

// Private headers included from outside their own layer, and why. A header
// matches an entry when its path starts with the entry's `header`.
struct PrivateException {
  const char* header;
  std::set<std::string> from;  // the layers that may include it
  const char* why;
};
const std::vector<PrivateException> kPrivateExceptions = {
    {"ir/op_def.h",
     {"shard", "runtime", "plan", "pages", "optim", "nn"},
     "the op table: every op's shape, kernel, gradient, sharding rule and cost, read where ops "
     "are partitioned, run, priced and drawn (op properties are data on the OpDef)"},
    {"tensor/",
     {"comm", "ir", "nn", "io", "bench"},
     "the tensor layer's kernel toolkit (SIMD lanes, vectorised math, tiled GEMM, broadcasting, "
     "the random stream, large arrays, int8 quantisation) shared by the kernels above it"},
    {"ir/einsum_equation.h", {"nn"}, "Dense and EinsumDense parse their equations as the op does"},
    {"ir/ops/", {"bench"}, "kernels measured on their own (bench)"},
    {"io/hf_tensors.h",
     {"models"},
     "a family's Hugging Face tensor names and checkpoint reads use io's safetensors lookup"},
    {"io/files.h",
     {"models"},
     "a family's Hugging Face and KerasHub writers write directories as io writes them"},
    {"plan/layout_map_export.h",
     {"io", "cli", "python"},
     "Keras's LayoutMap written from a plan: Keras variables (io), `autoshard plan`, Python"},
    {"pages/",
     {"cli", "python"},
     "the report pages, drawn by `autoshard plan --html`, `autoshard report` and Plan.html()"},
    {"cli/keras_progress.h",
     {"python"},
     "the Keras progress bar, one display for `autoshard keras-train` and ProgbarLogger"},
    {"io/keras/hdf5_file.h",
     {"python"},
     "model.weights.h5 of models with custom layers, written and read by weight name: the Keras "
     "file readers build models from configs, and a custom layer's config is Python code; and "
     "KerasHub's .lora.h5 adapter files (save_lora_weights), which hold no model"},
    {"io/",
     {"bench"},
     "bench/load_memory.cc measures the memory of the .keras reader (its zip and HDF5 readers)"},
};

// The layers `layer` may include: its row in kAllowed, transitively closed.
std::set<std::string> layers_allowed(const std::string& layer) {
  std::set<std::string> out;
  std::vector<std::string> todo(kAllowed.at(layer).begin(), kAllowed.at(layer).end());
  while (!todo.empty()) {
    const std::string next = todo.back();
    todo.pop_back();
    if (!out.insert(next).second) continue;
    for (const std::string& below : kAllowed.at(next)) todo.push_back(below);
  }
  return out;
}

// The layer a quoted include names, or "" for one that belongs to no layer.
std::string layer_of_include(const std::string& path) {
  std::string p = path;
  if (p.rfind("autoshard/", 0) == 0) p = p.substr(10);
  const size_t slash = p.find('/');
  if (slash == std::string::npos) return "";  // autoshard/error.h: the base every layer uses
  const std::string first = p.substr(0, slash);
  return kAllowed.count(first) ? first : "";
}

// Whether `header` (a private one, "ir/op_def.h") may be included from `layer`.
bool private_exception(const std::string& header, const std::string& layer) {
  for (const PrivateException& e : kPrivateExceptions)
    if (header.rfind(e.header, 0) == 0 && e.from.count(layer)) return true;
  return false;
}

struct LayerInclude {
  std::string file;  // "src/nn/layers.cc:12"
  std::string layer, header;
};

// Every quoted include of the C++ files of the tree, with its file's layer.
std::vector<LayerInclude> every_include(const fs::path& root, int& files) {
  const std::regex include_line(R"(^\s*#\s*include\s*\"([^\"]+)\")");
  std::vector<LayerInclude> out;
  for (const LayerRoot& r : kRoots) {
    if (!fs::exists(root / r.dir)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(root / r.dir)) {
      const std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".cc" && ext != ".h")) continue;
      const std::string rel = fs::relative(entry.path(), root / r.dir).string();
      const std::string layer = r.layer ? r.layer : rel.substr(0, rel.find('/'));
      if (!kAllowed.count(layer)) continue;
      ++files;
      std::ifstream in(entry.path());
      std::string line;
      for (int n = 1; std::getline(in, line); ++n) {
        std::smatch m;
        if (std::regex_search(line, m, include_line))
          out.push_back({std::string(r.dir) + "/" + rel + ":" + std::to_string(n), layer, m[1]});
      }
    }
  }
  return out;
}

fs::path tree_root() {
  return fs::path(AUTOSHARD_TEST_DATA).parent_path().parent_path();
}

TEST(Layering, EveryLayerIncludesOnlyItselfAndTheLayersBelow) {
  int files = 0;
  for (const LayerInclude& i : every_include(tree_root(), files)) {
    const std::string target = layer_of_include(i.header);
    if (target.empty() || target == i.layer) continue;
    EXPECT_TRUE(layers_allowed(i.layer).count(target))
        << i.file << " (layer " << i.layer << ") includes " << i.header << " of layer " << target;
  }
  EXPECT_GT(files, 50);
}

TEST(Layering, PrivateHeadersStayInTheirLayerOrSayWhy) {
  int files = 0;
  for (const LayerInclude& i : every_include(tree_root(), files)) {
    if (i.header.rfind("autoshard/", 0) == 0) continue;  // a public header
    const std::string target = layer_of_include(i.header);
    if (target.empty() || target == i.layer) continue;
    EXPECT_TRUE(private_exception(i.header, i.layer))
        << i.file << " (layer " << i.layer << ") includes " << i.header
        << ", a private header of layer " << target
        << ": include its public header (include/autoshard/" << target
        << "/) or add an exception to kPrivateExceptions saying why";
  }
}

TEST(Layering, TheCodeAboveTheLibraryIsScanned) {
  int files = 0;
  std::set<std::string> layers;
  for (const LayerInclude& i : every_include(tree_root(), files)) layers.insert(i.layer);
  EXPECT_TRUE(layers.count("python"));
  EXPECT_TRUE(layers.count("bench"));
  EXPECT_TRUE(layers.count("solver"));
  EXPECT_TRUE(layers.count("pages"));
}

}  // namespace
