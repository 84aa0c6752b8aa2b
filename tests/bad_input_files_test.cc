// Hostile files and directories (issue 54, round 3): a file a directory
// names never resolves outside it (symbolic links to a planted secret, paths
// through a linked directory), a FIFO at any door ends in one error within
// seconds, an empty .keras member and an .npz that inflates past the memory
// limit are one line, convert writes the model.json it is given, and
// directory saves keep the files a user had.
#include <sys/stat.h>
#include <zip.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "autoshard/io/npy.h"
#include "autoshard/models/gpt2/formats.h"
#include "autoshard/models/keras_hub_model.h"
#include "cli_runner.h"
#include "io/zip_archive.h"
#include "test_util.h"

namespace autoshard {
namespace {

namespace fs = std::filesystem;
using cli_runner::run;

const std::string kData = AUTOSHARD_TEST_DATA;
const std::string kTfjs = kData + "/keras_layers/tfjs/batch_normalization_dense";
const std::string kKeras = kData + "/keras_files/batch_normalization_dense.keras";
// What a planted file outside a model holds; never in any output or message.
const std::string kSecret = "TOPSECRET-password=hunter2";

std::string slurp_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void put_file(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

// The secret, repeated to `bytes` (292: the TF.js fixture's shard size, so
// that only the symbolic link can refuse it).
std::string secret_bytes(size_t bytes = 292) {
  std::string s;
  while (s.size() < bytes) s += kSecret + "-";
  return s.substr(0, bytes);
}

// A TF.js model directory whose manifest names `shard`.
void tfjs_model(const fs::path& dir, const std::string& shard) {
  nlohmann::json j = nlohmann::json::parse(slurp_file(kTfjs + ".json"));
  j["weightsManifest"][0]["paths"] = {shard};
  put_file(dir / "model.json", j.dump());
}

// A copy of the fixture directory `from`, files only.
void copy_tree(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  fs::copy(from, to, fs::copy_options::recursive);
}

// Replaces `file` (relative to `dir`) by a link to a copy of itself made
// outside the directory, or by a link to `target` when given.
void link_outside(const fs::path& dir, const std::string& file, const fs::path& outside,
                  const fs::path& target = {}) {
  fs::path to = target;
  if (to.empty()) {
    to = outside / fs::path(file).filename();
    fs::copy_file(dir / file, to, fs::copy_options::overwrite_existing);
  }
  fs::remove(dir / file);
  fs::create_symlink(to, dir / file);
}

void make_fifo(const fs::path& p) {
  fs::create_directories(p.parent_path());
  fs::remove(p);
  ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0) << p;
}

class BadInputFiles : public ::testing::Test {
 public:  // for the cases' setup functions
  testing::ScratchDir scratch_{"bad_input_files"};
  fs::path dir(const std::string& name) const { return scratch_.path / name; }
  fs::path outside() const {
    fs::create_directories(scratch_.path / "outside");
    return scratch_.path / "outside";
  }
  fs::path secret() const {
    put_file(outside() / "secret.bin", secret_bytes());
    return outside() / "secret.bin";
  }
};

// ---- K11: files a directory names stay inside it ----

struct EscapeCase {
  const char* name;
  // Builds the input under the scratch directory; returns the command line.
  std::function<std::string(BadInputFiles&)> setup;
  const char* says;  // in the one error line
};

class DirectoryEscapes : public BadInputFiles, public ::testing::WithParamInterface<EscapeCase> {};

TEST_P(DirectoryEscapes, AreRefusedAndTheSecretNeverAppears) {
  const std::string args = GetParam().setup(*this);
  const cli_runner::Result r = run(args, "", 60);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find(GetParam().says), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("TOPSECRET"), std::string::npos) << r.output;
  EXPECT_EQ(cli_runner::count(r.output, "\n"), 1) << r.output;
  EXPECT_FALSE(fs::exists(dir("out.h5")));
  EXPECT_FALSE(fs::exists(dir("out")));
}

// A KerasHub GPT-2 preset with the tokenizer of the fixtures' GPT-2 preset.
fs::path preset_with_tokenizer(BadInputFiles& t) {
  const fs::path p = t.dir("preset");
  copy_tree(kData + "/keras_hub/gpt2", p);
  fs::copy(kData + "/keras_hub/tokenizers/gpt2", p, fs::copy_options::recursive);
  return p;
}

// A Hugging Face GPT-2 directory with vocab.json and merges.txt.
fs::path hf_with_tokenizer(BadInputFiles& t) {
  const fs::path h = t.dir("hf");
  copy_tree(kData + "/hf_gpt2", h);
  fs::copy(kData + "/tokenizers/gpt2_files", h, fs::copy_options::recursive);
  return h;
}

std::string convert_to_out(BadInputFiles& t, const fs::path& in, const char* out = "out") {
  return in.string() + " " + t.dir(out).string();
}

INSTANTIATE_TEST_SUITE_P(
    SymlinksAndSlashes, DirectoryEscapes,
    ::testing::Values(EscapeCase{"TfjsShardLinkedOutside",
                                 [](BadInputFiles& t) {
                                   tfjs_model(t.dir("m"), "w.bin");
                                   fs::create_symlink(t.secret(), t.dir("m") / "w.bin");
                                   return "convert " + convert_to_out(t, t.dir("m"), "out.h5");
                                 },
                                 "outside"},
                      EscapeCase{"TfjsShardThroughALinkedDirectory",
                                 [](BadInputFiles& t) {
                                   tfjs_model(t.dir("m"), "lnk/secret.bin");
                                   t.secret();
                                   fs::create_symlink(t.outside(), t.dir("m") / "lnk");
                                   return "convert " + convert_to_out(t, t.dir("m"), "out.h5");
                                 },
                                 "no '/'"},
                      EscapeCase{"TfjsModelJsonLinkedOutside",
                                 [](BadInputFiles& t) {
                                   tfjs_model(t.outside(), "w.bin");
                                   fs::create_directories(t.dir("m"));
                                   fs::create_symlink(t.outside() / "model.json",
                                                      t.dir("m") / "model.json");
                                   fs::copy_file(kTfjs + ".weights.bin", t.dir("m") / "w.bin");
                                   return "convert " + convert_to_out(t, t.dir("m"), "out.h5");
                                 },
                                 "outside"},
                      EscapeCase{"PresetWeightsLinkedOutside",
                                 [](BadInputFiles& t) {
                                   copy_tree(kData + "/keras_hub/gpt2", t.dir("p"));
                                   link_outside(t.dir("p"), "model.weights.h5", t.outside());
                                   return "convert " + convert_to_out(t, t.dir("p"));
                                 },
                                 "outside"},
                      EscapeCase{"PresetConfigLinkedOutside",
                                 [](BadInputFiles& t) {
                                   copy_tree(kData + "/keras_hub/gpt2", t.dir("p"));
                                   link_outside(t.dir("p"), "config.json", t.outside());
                                   return "convert " + convert_to_out(t, t.dir("p"));
                                 },
                                 "outside"},
                      EscapeCase{"PresetTokenizerAssetLinkedOutsideOnConvert",
                                 [](BadInputFiles& t) {
                                   const fs::path p = preset_with_tokenizer(t);
                                   link_outside(p, "assets/tokenizer/merges.txt", t.outside(),
                                                t.secret());
                                   return "convert --keras-hub " + convert_to_out(t, p);
                                 },
                                 "outside"},
                      EscapeCase{"PresetTokenizerAssetLinkedOutsideOnTokenize",
                                 [](BadInputFiles& t) {
                                   const fs::path p = preset_with_tokenizer(t);
                                   link_outside(p, "assets/tokenizer/merges.txt", t.outside(),
                                                t.secret());
                                   return "tokenize --text hi --weights " + p.string();
                                 },
                                 "outside"},
                      EscapeCase{"HfConfigLinkedOutside",
                                 [](BadInputFiles& t) {
                                   copy_tree(kData + "/hf_gpt2", t.dir("h"));
                                   link_outside(t.dir("h"), "config.json", t.outside());
                                   return "convert " + convert_to_out(t, t.dir("h"));
                                 },
                                 "outside"},
                      EscapeCase{"HfWeightsLinkedOutside",
                                 [](BadInputFiles& t) {
                                   copy_tree(kData + "/hf_gpt2", t.dir("h"));
                                   link_outside(t.dir("h"), "model.safetensors", t.outside());
                                   return "convert " + convert_to_out(t, t.dir("h"));
                                 },
                                 "outside"},
                      EscapeCase{"HfMergesLinkedToASecret",
                                 [](BadInputFiles& t) {
                                   const fs::path h = hf_with_tokenizer(t);
                                   link_outside(h, "merges.txt", t.outside(), t.secret());
                                   return "tokenize --text hi --weights " + h.string();
                                 },
                                 "outside"},
                      EscapeCase{"HfVocabLinkedToASecret",
                                 [](BadInputFiles& t) {
                                   const fs::path h = t.dir("hf");
                                   copy_tree(kData + "/tokenizers/wordpiece_files", h);
                                   link_outside(h, "vocab.txt", t.outside(), t.secret());
                                   return "tokenize --text hi --weights " + h.string();
                                 },
                                 "outside"},
                      // Not a link: a file inside that is not what it claims is refused
                      // without being quoted.
                      EscapeCase{"HfMergesThatAreNotMerges",
                                 [](BadInputFiles& t) {
                                   const fs::path h = hf_with_tokenizer(t);
                                   put_file(h / "merges.txt", "#version: 0.2\n" + kSecret + "\n");
                                   return "tokenize --text hi --weights " + h.string();
                                 },
                                 "line 2 is not two tokens"}),
    [](const ::testing::TestParamInfo<EscapeCase>& i) { return std::string(i.param.name); });

// A Hugging Face hub cache links a snapshot's files to its blobs: allowed.
TEST_F(BadInputFiles, HubCacheSnapshotsMayLinkToTheirBlobs) {
  const fs::path repo = dir("models--gpt2"), snap = repo / "snapshots" / "abc";
  fs::create_directories(repo / "blobs");
  fs::create_directories(snap);
  for (const char* f : {"config.json", "model.safetensors"}) {
    fs::copy_file(kData + "/hf_gpt2/" + f, repo / "blobs" / (std::string("b-") + f));
    fs::create_symlink(fs::path("../../blobs") / (std::string("b-") + f), snap / f);
  }
  const cli_runner::Result r = run("convert " + snap.string() + " " + dir("out").string());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir("out") / "model.safetensors"));
}

// ---- FIFOs at every door: one error, within seconds ----

struct FifoCase {
  const char* name;
  std::function<std::string(BadInputFiles&)> setup;  // the command line
};

class FifoDoors : public BadInputFiles, public ::testing::WithParamInterface<FifoCase> {};

TEST_P(FifoDoors, EndInOneErrorWithinSeconds) {
  const std::string args = GetParam().setup(*this);
  const cli_runner::Result r = run(args, "", 20);
  EXPECT_EQ(r.code, 1) << r.output;  // 124: the time limit ended a hang
  EXPECT_LT(r.seconds, 15);
  EXPECT_EQ(cli_runner::count(r.output, "\n"), 1) << r.output;
}

INSTANTIATE_TEST_SUITE_P(
    EveryReader, FifoDoors,
    ::testing::Values(FifoCase{"TfjsShard",
                               [](BadInputFiles& t) {
                                 tfjs_model(t.dir("m"), "w.bin");
                                 make_fifo(t.dir("m") / "w.bin");
                                 return "convert " + convert_to_out(t, t.dir("m"), "out.h5");
                               }},
                      FifoCase{"TfjsModelJson",
                               [](BadInputFiles& t) {
                                 make_fifo(t.dir("m") / "model.json");
                                 return "convert " + convert_to_out(t, t.dir("m"), "out.h5");
                               }},
                      FifoCase{"PresetConfig",
                               [](BadInputFiles& t) {
                                 copy_tree(kData + "/keras_hub/gpt2", t.dir("p"));
                                 make_fifo(t.dir("p") / "config.json");
                                 return "convert " + convert_to_out(t, t.dir("p"));
                               }},
                      FifoCase{"PresetWeights",
                               [](BadInputFiles& t) {
                                 copy_tree(kData + "/keras_hub/gpt2", t.dir("p"));
                                 make_fifo(t.dir("p") / "model.weights.h5");
                                 return "convert " + convert_to_out(t, t.dir("p"));
                               }},
                      FifoCase{"PresetTokenizerAsset",
                               [](BadInputFiles& t) {
                                 const fs::path p = preset_with_tokenizer(t);
                                 make_fifo(p / "assets/tokenizer/vocabulary.json");
                                 return "tokenize --text hi --weights " + p.string();
                               }},
                      FifoCase{"HfWeights",
                               [](BadInputFiles& t) {
                                 copy_tree(kData + "/hf_gpt2", t.dir("h"));
                                 make_fifo(t.dir("h") / "model.safetensors");
                                 return "convert " + convert_to_out(t, t.dir("h"));
                               }},
                      FifoCase{"HfTokenizerJson",
                               [](BadInputFiles& t) {
                                 copy_tree(kData + "/hf_gpt2", t.dir("h"));
                                 make_fifo(t.dir("h") / "tokenizer.json");
                                 return "tokenize --text hi --weights " + t.dir("h").string();
                               }},
                      FifoCase{"HfMerges",
                               [](BadInputFiles& t) {
                                 const fs::path h = hf_with_tokenizer(t);
                                 make_fifo(h / "merges.txt");
                                 return "tokenize --text hi --weights " + h.string();
                               }},
                      FifoCase{"KerasFile",
                               [](BadInputFiles& t) {
                                 make_fifo(t.dir("m.keras"));
                                 put_file(t.dir("x.npy"), npy_bytes(Tensor::zeros({2, 7})));
                                 return "predict --model " + t.dir("m.keras").string() + " --x " +
                                        t.dir("x.npy").string() + " --out " +
                                        t.dir("p.npy").string();
                               }},
                      FifoCase{"Npy",
                               [](BadInputFiles& t) {
                                 make_fifo(t.dir("x.npy"));
                                 return "predict --model " + kKeras + " --x " +
                                        t.dir("x.npy").string() + " --out " +
                                        t.dir("p.npy").string();
                               }},
                      FifoCase{"Npz",
                               [](BadInputFiles& t) {
                                 make_fifo(t.dir("x.npz"));
                                 return "predict --model " + kKeras + " --x " +
                                        t.dir("x.npz").string() + " --out " +
                                        t.dir("p.npy").string();
                               }}),
    [](const ::testing::TestParamInfo<FifoCase>& i) { return std::string(i.param.name); });

// ---- K01: an empty member of a .keras zip ----

TEST_F(BadInputFiles, EmptyKerasMembersAreOneLine) {
  const ZipArchive real(kKeras);
  for (const char* empty : {"config.json", "metadata.json"}) {
    const fs::path parts = dir(std::string("parts-") + empty);
    std::vector<std::pair<std::string, std::string>> members;
    for (const std::string& name : real.names()) {
      const ZipMember m = real.open_member(name);
      std::string bytes(m.size, '\0');
      m.read(0, m.size, bytes.data());
      put_file(parts / name, name == empty ? "" : bytes);
      members.emplace_back(name, (parts / name).string());
    }
    const fs::path file = dir(std::string("empty-") + empty + ".keras");
    write_stored_zip(file.string(), members);
    put_file(dir("x.npy"), npy_bytes(Tensor::zeros({2, 7})));
    const cli_runner::Result r = run("predict --model " + file.string() + " --x " +
                                     dir("x.npy").string() + " --out " + dir("p.npy").string());
    EXPECT_EQ(r.code, 1) << empty << ": " << r.output;
    EXPECT_NE(r.output.find(std::string(empty) + " is empty"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(file.string()), std::string::npos) << r.output;
    EXPECT_EQ(cli_runner::count(r.output, "\n"), 1) << r.output;
  }
}

// ---- N01: an .npz member that inflates past the memory limit ----

// An .npz whose one deflated member declares a [rows, 7] float32 array of
// zeros: a few hundred KB on disk for 134 MB inflated.
void write_npz_bomb(const fs::path& file, int64_t rows) {
  std::string npy = npy_bytes(Tensor::zeros({1, 7}));
  const std::string small_shape = "(1, 7)", big_shape = "(" + std::to_string(rows) + ", 7)";
  const size_t at = npy.find(small_shape);
  ASSERT_NE(at, std::string::npos);
  // The header is padded with spaces: the longer shape takes some of them.
  npy.replace(at, small_shape.size(), big_shape);
  const size_t pad = npy.find("  ", at);
  npy.erase(pad, big_shape.size() - small_shape.size());
  npy.resize(npy.size() - 28);  // the one row's data
  npy.resize(npy.size() + static_cast<size_t>(rows) * 28, '\0');
  int code = 0;
  zip_t* z = zip_open(file.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &code);
  ASSERT_NE(z, nullptr);
  zip_source_t* src = zip_source_buffer(z, npy.data(), npy.size(), 0);
  const zip_int64_t i = zip_file_add(z, "x.npy", src, 0);
  ASSERT_GE(i, 0);
  zip_set_file_compression(z, static_cast<zip_uint64_t>(i), ZIP_CM_DEFLATE, 9);
  ASSERT_EQ(zip_close(z), 0);
}

TEST_F(BadInputFiles, NpzBombIsRefusedBeforeInflating) {
  write_npz_bomb(dir("bomb.npz"), 4800000);
  ASSERT_LT(fs::file_size(dir("bomb.npz")), 1 << 20);
  const cli_runner::Result r = run("predict --model " + kKeras + " --x " +
                                       dir("bomb.npz").string() + " --out " + dir("p.npy").string(),
                                   "AUTOSHARD_MEMORY_LIMIT=64MiB");
  EXPECT_EQ(r.code, 1) << r.output;
  for (const std::string& part :
       {dir("bomb.npz").string(), std::string("[4800000, 7]"), std::string("134400000 bytes"),
        std::string("64 MiB"), std::string("AUTOSHARD_MEMORY_LIMIT")})
    EXPECT_NE(r.output.find(part), std::string::npos) << part << " in " << r.output;
  EXPECT_EQ(cli_runner::count(r.output, "\n"), 1) << r.output;
  EXPECT_FALSE(fs::exists(dir("p.npy")));
}

// ---- S01: convert to some/dir/model.json ----

TEST_F(BadInputFiles, ConvertWritesTheModelJsonItIsGiven) {
  fs::create_directories(dir("out"));
  put_file(dir("out") / "thesis.txt", "years of work");
  const fs::path json = dir("out") / "model.json";
  cli_runner::Result r = run("convert " + kKeras + " " + json.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::is_regular_file(json));
  EXPECT_TRUE(fs::is_regular_file(dir("out") / "group1-shard1of1.bin"));
  EXPECT_EQ(slurp_file(dir("out") / "thesis.txt"), "years of work");
  // It reads back, and a second convert refuses what exists.
  r = run("convert " + json.string() + " " + dir("back.h5").string());
  EXPECT_EQ(r.code, 0) << r.output;
  r = run("convert " + kKeras + " " + json.string());
  EXPECT_EQ(r.code, 1) << r.output;
  fs::remove(json);
  r = run("convert " + kKeras + " " + json.string());  // the shard is in the way
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("group1-shard1of1.bin"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(json));
}

// ---- P06: directory saves keep what a user had ----

struct SaveCase {
  const char* name;
  std::function<void(GPT2&, const std::string&, bool)> save;
};

class DirectorySaves : public BadInputFiles, public ::testing::WithParamInterface<SaveCase> {
 protected:
  GPT2& model() {
    if (!model_) {
      model_ = std::make_unique<GPT2>(gpt2_config_of(kData + "/hf_gpt2"), 4);
      load_gpt2_weights(*model_, kData + "/hf_gpt2");
    }
    return *model_;
  }
  std::string save_error(const fs::path& to, bool overwrite) {
    return testing::error_of([&] { GetParam().save(model(), to.string(), overwrite); });
  }

 private:
  std::unique_ptr<GPT2> model_;
};

TEST_P(DirectorySaves, KeepAUsersFilesAndRefuseWithoutOverwrite) {
  const fs::path work = dir("mywork");
  put_file(work / "thesis.txt", "years of work");
  put_file(work / "sub" / "data.csv", "1,2,3");
  EXPECT_NE(save_error(work, false).find("exists and is not empty"), std::string::npos);
  EXPECT_FALSE(fs::exists(work / "config.json"));
  EXPECT_EQ(save_error(work, true), "");
  EXPECT_TRUE(fs::is_regular_file(work / "config.json"));
  EXPECT_EQ(slurp_file(work / "thesis.txt"), "years of work");
  EXPECT_EQ(slurp_file(work / "sub" / "data.csv"), "1,2,3");
  // Again, over its own files: replaced, the user's kept.
  EXPECT_EQ(save_error(work, true), "");
  EXPECT_EQ(slurp_file(work / "thesis.txt"), "years of work");
  for (const auto& e : fs::directory_iterator(scratch_.path))  // no temporaries left
    EXPECT_FALSE(e.path().filename().string().starts_with(".tmp-")) << e.path();
}

TEST_P(DirectorySaves, NeverMakeADirectoryWhereAFileIs) {
  put_file(dir("notes.txt"), "notes");
  for (bool overwrite : {false, true}) {
    EXPECT_NE(save_error(dir("notes.txt"), overwrite).find("is a file; give a directory"),
              std::string::npos);
    EXPECT_EQ(slurp_file(dir("notes.txt")), "notes");
  }
}

TEST_P(DirectorySaves, ConflictsLeaveWhatWasThere) {
  // A directory where the save writes a file: nothing is moved.
  const fs::path work = dir("w");
  put_file(work / "thesis.txt", "years of work");
  fs::create_directories(work / "config.json");
  EXPECT_NE(save_error(work, true).find("is a directory where this save writes a file"),
            std::string::npos);
  EXPECT_TRUE(fs::is_directory(work / "config.json"));
  EXPECT_EQ(slurp_file(work / "thesis.txt"), "years of work");
  EXPECT_EQ(std::distance(fs::directory_iterator(work), fs::directory_iterator()), 2);
}

INSTANTIATE_TEST_SUITE_P(
    EveryWriter, DirectorySaves,
    ::testing::Values(SaveCase{"HuggingFace",
                               [](GPT2& m, const std::string& d, bool overwrite) {
                                 save_hf_gpt2(m, d, overwrite);
                               }},
                      SaveCase{"KerasHubPreset",
                               [](GPT2& m, const std::string& d, bool overwrite) {
                                 keras_hub::save_preset(m, *config_of_model(m), d, "", overwrite);
                               }}),
    [](const ::testing::TestParamInfo<SaveCase>& i) { return std::string(i.param.name); });

// A weight file of the format left from an earlier save, which readers would
// take instead of the new one, is refused by name (never removed).
TEST_F(BadInputFiles, StaleWeightIndexIsRefusedNotRemoved) {
  GPT2 model(gpt2_config_of(kData + "/hf_gpt2"), 4);
  load_gpt2_weights(model, kData + "/hf_gpt2");
  const fs::path work = dir("w");
  put_file(work / "model.safetensors.index.json", "{}");
  const std::string e =
      testing::error_of([&] { save_hf_gpt2(model, work.string(), /*overwrite=*/true); });
  EXPECT_NE(e.find("model.safetensors.index.json"), std::string::npos) << e;
  EXPECT_EQ(slurp_file(work / "model.safetensors.index.json"), "{}");
  EXPECT_FALSE(fs::exists(work / "model.safetensors"));
}

}  // namespace
}  // namespace autoshard
