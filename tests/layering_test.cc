// The layers of the library (docs/architecture.md) include only downward:
// every #include in src/<layer>/ and include/autoshard/<layer>/ names a
// header of its own layer or of one it is allowed to depend on. CMake links
// the same graph (one library per layer); this test also catches includes of
// header-only code, which the linker cannot see.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>

namespace {

namespace fs = std::filesystem;

// Each layer and the layers it may use, transitively closed.
const std::map<std::string, std::set<std::string>> kAllowed = {
    {"tensor", {}},
    {"comm", {"tensor"}},
    {"ir", {"tensor", "comm"}},
    {"shard", {"tensor", "ir"}},
    {"runtime", {"tensor", "comm", "ir", "shard"}},
    {"plan", {"tensor", "comm", "ir", "shard", "runtime"}},
    {"optim", {"tensor", "ir"}},
    {"nn", {"tensor", "comm", "ir", "shard", "runtime", "plan", "optim"}},
    {"io", {"tensor", "comm", "ir", "shard", "runtime", "plan", "optim", "nn"}},
    {"models", {"tensor", "comm", "ir", "shard", "runtime", "plan", "optim", "nn", "io"}},
    {"app", {"tensor", "comm", "ir", "shard", "runtime", "plan", "optim", "nn", "io", "models"}},
    {"cli",
     {"tensor", "comm", "ir", "shard", "runtime", "plan", "optim", "nn", "io", "models", "app"}},
};

// The layer a quoted include names, or "" for one that belongs to no layer.
std::string layer_of_include(const std::string& path) {
  std::string p = path;
  if (p.rfind("autoshard/", 0) == 0) p = p.substr(10);
  const size_t slash = p.find('/');
  if (slash == std::string::npos) return "";  // autoshard/error.h: the base every layer uses
  const std::string first = p.substr(0, slash);
  return kAllowed.count(first) ? first : "";
}

TEST(Layering, EveryLayerIncludesOnlyItselfAndTheLayersBelow) {
  const fs::path root = fs::path(AUTOSHARD_TEST_DATA).parent_path().parent_path();
  const std::regex include_line(R"(^\s*#\s*include\s*\"([^\"]+)\")");
  int files = 0;
  for (const std::string base : {"src", "include/autoshard"})
    for (const auto& entry : fs::recursive_directory_iterator(root / base)) {
      if (!entry.is_regular_file()) continue;
      const std::string rel = fs::relative(entry.path(), root / base).string();
      const std::string layer = rel.substr(0, rel.find('/'));
      if (!kAllowed.count(layer)) continue;
      ++files;
      std::ifstream in(entry.path());
      std::string line;
      for (int n = 1; std::getline(in, line); ++n) {
        std::smatch m;
        if (!std::regex_search(line, m, include_line)) continue;
        const std::string target = layer_of_include(m[1]);
        if (target.empty() || target == layer) continue;
        EXPECT_TRUE(kAllowed.at(layer).count(target))
            << base << "/" << rel << ":" << n << " (layer " << layer << ") includes " << m[1]
            << " of layer " << target;
      }
    }
  EXPECT_GT(files, 50);
}

}  // namespace
