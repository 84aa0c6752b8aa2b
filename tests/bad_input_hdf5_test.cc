// Bad input, round 3, HDF5 (issue 54): a model file never reads another
// file, and libhdf5 cannot crash, hang or run away with memory. Each file
// here is a fixture changed in the test with libhdf5's C API or a byte
// flip: a secret planted outside the model, referred to by external
// storage, a virtual dataset or an external link (and a FIFO, and a VDS
// whose source is itself), must give exit 1, one error line naming the
// file and the dataset, none of the secret's bytes, and no output file;
// damaged files end in one line within seconds.
#include <cblas.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "autoshard/error.h"
#include "cli_runner.h"
#include "io/keras/hdf5_file.h"
#include "io/zip_archive.h"
#include "test_util.h"

namespace autoshard {
namespace {

namespace fs = std::filesystem;
using cli_runner::count;
using cli_runner::Result;
using cli_runner::run;
using keras::H5File;

// What the secret file holds: none of it may appear in a message.
constexpr const char* kH5Secret = "H5SECRET-do-not-print-this-0123456789";

// The Dense kernel (7 x 5 float32) of batch_normalization_dense, as Keras 2
// (.h5) and Keras 3 (.keras's model.weights.h5) name it.
constexpr const char* kLegacyKernel = "model_weights/dense/dense/kernel:0";
constexpr const char* kKeras3Kernel = "layers/dense/vars/0";

// How a case replaces the kernel dataset `path` of the open file `file`;
// `outside` is the folder beside the model that holds the secret.
using H5Replace = std::function<void(hid_t file, const std::string& path, const fs::path& outside)>;

hid_t h5_kernel_space() {
  const hsize_t dims[2] = {7, 5};
  return H5Screate_simple(2, dims, nullptr);
}

// A dataset whose creation properties `dcpl` put its data elsewhere.
void h5_create_with(hid_t file, const std::string& path, hid_t dcpl) {
  const hid_t space = h5_kernel_space();
  const hid_t ds =
      H5Dcreate2(file, path.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  ASSERT_GE(ds, 0) << path;
  H5Dclose(ds);
  H5Sclose(space);
  H5Pclose(dcpl);
}

void h5_external_storage(hid_t file, const std::string& path, const std::string& target) {
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  ASSERT_GE(H5Pset_external(dcpl, target.c_str(), 0, 7 * 5 * 4), 0);
  h5_create_with(file, path, dcpl);
}

void h5_virtual_dataset(hid_t file, const std::string& path, const std::string& source_file,
                        const std::string& source) {
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  const hid_t space = h5_kernel_space();
  ASSERT_GE(H5Pset_virtual(dcpl, space, source_file.c_str(), source.c_str(), space), 0);
  H5Sclose(space);
  h5_create_with(file, path, dcpl);
}

struct H5ReferenceCase {
  std::string name;
  H5Replace replace;
  std::string needle;  // in the error, after the dataset's path
};

std::vector<H5ReferenceCase> h5_reference_cases() {
  const std::string storage = "stores its data in another file (HDF5 external storage)";
  const std::string vds = "is a virtual dataset (HDF5 VDS)";
  const std::string link = "is a link to another file (an HDF5 external link)";
  return {
      {"ExternalStorage",
       [](hid_t f, const std::string& p, const fs::path& out) {
         h5_external_storage(f, p, (out / "secret.txt").string());
       },
       storage},
      {"ExternalStorageRelative",
       [](hid_t f, const std::string& p, const fs::path&) {
         h5_external_storage(f, p, "../outside/secret.txt");
       },
       storage},
      {"ExternalStorageOnAFifo",  // reading it would block forever
       [](hid_t f, const std::string& p, const fs::path& out) {
         h5_external_storage(f, p, (out / "fifo").string());
       },
       storage},
      {"VirtualDatasetOfAnotherFile",
       [](hid_t f, const std::string& p, const fs::path& out) {
         h5_virtual_dataset(f, p, (out / "secret.h5").string(), "/data");
       },
       vds},
      {"VirtualDatasetOfItself",  // libhdf5 recursed until it crashed
       [](hid_t f, const std::string& p, const fs::path&) { h5_virtual_dataset(f, p, ".", p); },
       vds},
      {"ExternalLinkToADataset",
       [](hid_t f, const std::string& p, const fs::path& out) {
         ASSERT_GE(H5Lcreate_external((out / "secret.h5").c_str(), "/data", f, p.c_str(),
                                      H5P_DEFAULT, H5P_DEFAULT),
                   0);
       },
       link},
  };
}

class Hdf5References : public testing::TempDirTest,
                       public ::testing::WithParamInterface<H5ReferenceCase> {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    outside_ = dir_ / "outside";
    fs::create_directories(outside_);
    fs::create_directories(dir_ / "model");
    std::string secret(7 * 5 * 4, '.');
    std::memcpy(secret.data(), kH5Secret, std::strlen(kH5Secret));
    std::ofstream(outside_ / "secret.txt", std::ios::binary) << secret;
    ASSERT_EQ(::mkfifo((outside_ / "fifo").c_str(), 0600), 0);
    // secret.h5: dataset /data (7 x 5 float32) holding the secret's bytes.
    const hid_t f =
        H5Fcreate((outside_ / "secret.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    const hid_t space = h5_kernel_space();
    const hid_t ds =
        H5Dcreate2(f, "data", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, secret.data());
    H5Dclose(ds);
    H5Sclose(space);
    H5Fclose(f);
  }
  // Replaces `path` in the HDF5 file `h5` as the case says.
  void change(const fs::path& h5, const std::string& path, const H5Replace& replace) {
    const hid_t f = H5Fopen(h5.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    ASSERT_GE(H5Ldelete(f, path.c_str(), H5P_DEFAULT), 0);
    replace(f, path, outside_);
    H5Fclose(f);
  }
  // `autoshard convert` refuses `model` with one line naming it, `path` and
  // the case's needle, within seconds, printing none of the secret and
  // writing nothing.
  void expect_refused(const fs::path& model, const std::string& path, const std::string& needle) {
    const fs::path out = dir_ / "converted.keras";
    const Result r = run("convert " + model.string() + " " + out.string());
    SCOPED_TRACE(r.output);
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(count(r.output, "\n"), 1);
    EXPECT_EQ(count(r.output, "autoshard: error: "), 1);
    EXPECT_NE(r.output.find(model.string()), std::string::npos);
    EXPECT_NE(r.output.find("'" + path + "' " + needle), std::string::npos) << needle;
    EXPECT_EQ(r.output.find("H5SECRET"), std::string::npos);
    EXPECT_LT(r.seconds, 20);
    EXPECT_FALSE(fs::exists(out));
  }
  fs::path outside_;
};

TEST_P(Hdf5References, LegacyH5IsRefused) {
  const fs::path model = dir_ / "model" / "model.h5";
  fs::copy_file(fs::path(AUTOSHARD_TEST_DATA) / "keras_files/batch_normalization_dense.h5", model);
  change(model, kLegacyKernel, GetParam().replace);
  expect_refused(model, kLegacyKernel, GetParam().needle);
}

TEST_P(Hdf5References, KerasWeightsAreRefused) {
  // The .keras's members, its model.weights.h5 changed, zipped again.
  const ZipArchive zip(std::string(AUTOSHARD_TEST_DATA) +
                       "/keras_files/batch_normalization_dense.keras");
  std::vector<std::pair<std::string, std::string>> members;
  for (const char* name : {"metadata.json", "config.json", "model.weights.h5"}) {
    const fs::path at = dir_ / "model" / name;
    std::ofstream(at, std::ios::binary) << zip.read_text(name, 1 << 20);
    members.emplace_back(name, at.string());
  }
  change(dir_ / "model" / "model.weights.h5", kKeras3Kernel, GetParam().replace);
  const fs::path model = dir_ / "model" / "model.keras";
  write_stored_zip(model.string(), members);
  expect_refused(model, kKeras3Kernel, GetParam().needle);
}

INSTANTIATE_TEST_SUITE_P(Cases, Hdf5References, ::testing::ValuesIn(h5_reference_cases()),
                         [](const auto& info) { return info.param.name; });

class Hdf5Damage : public testing::TempDirTest {};

TEST_F(Hdf5Damage, AnExternalLinkOnTheWayIsRefused) {
  // A group on the path to the weights is an external link: refused before
  // libhdf5 follows it, naming the link.
  const fs::path model = dir_ / "model.h5";
  fs::copy_file(fs::path(AUTOSHARD_TEST_DATA) / "keras_files/batch_normalization_dense.h5", model);
  const hid_t f = H5Fopen(model.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(H5Ldelete(f, "model_weights/dense", H5P_DEFAULT), 0);
  ASSERT_GE(
      H5Lcreate_external("/etc/hostname", "/", f, "model_weights/dense", H5P_DEFAULT, H5P_DEFAULT),
      0);
  H5Fclose(f);
  const Result r = run("convert " + model.string() + " " + (dir_ / "out.keras").string());
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_EQ(count(r.output, "\n"), 1) << r.output;
  EXPECT_NE(r.output.find("'model_weights/dense' is a link to another file"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "out.keras"));
}

// Single-byte changes of the fixtures that, before the pre-flight child,
// crashed libhdf5 (SIGSEGV in its global-heap read under H5Aread of a
// variable-length string) or had it allocate and touch 2.8-4.1 GB.
struct H5Flip {
  const char* fixture;
  long offset;
  int value;  // the byte written there
};

class Hdf5ByteFlips : public testing::TempDirTest, public ::testing::WithParamInterface<H5Flip> {};

TEST_P(Hdf5ByteFlips, EndInOneLineWithinSeconds) {
  const H5Flip flip = GetParam();
  const fs::path model = dir_ / flip.fixture;
  fs::copy_file(fs::path(AUTOSHARD_TEST_DATA) / "keras_files" / flip.fixture, model);
  {
    std::fstream f(model, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(flip.offset);
    f.put(static_cast<char>(flip.value));
  }
  // /usr/bin/time reports the largest memory of the CLI and its children.
  const Result r = run("convert " + model.string() + " " + (dir_ / "out.keras").string(),
                       "/usr/bin/time -f 'maxrss=%M'");
  SCOPED_TRACE(r.output);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(count(r.output, "autoshard: error: "), 1);
  EXPECT_EQ(count(r.output, "\n"), 3);  // the error, time's "Command exited ..." and maxrss
  EXPECT_NE(r.output.find(model.string()), std::string::npos);
  EXPECT_LT(r.seconds, 15);
  const size_t at = r.output.find("maxrss=");
  ASSERT_NE(at, std::string::npos);
  EXPECT_LT(std::stol(r.output.substr(at + 7)), 2L << 20);  // KiB: under 2 GiB
  EXPECT_FALSE(fs::exists(dir_ / "out.keras"));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Hdf5ByteFlips,
                         ::testing::Values(H5Flip{"batch_normalization_dense.h5", 4212, 0xff},
                                           H5Flip{"resnet_cnn.h5", 5738, 0xff},
                                           H5Flip{"resnet_cnn.h5", 14687, 0xff},
                                           H5Flip{"resnet_cnn.h5", 950, 0xff}));

// The pre-flight child itself: made to crash, hang or allocate without end
// (through the tests-only hook), the parent throws one line in bounded time.
struct H5ChildFailure {
  const char* name;
  void (*hook)();
  const char* needle;
};

void h5_crash_now() {
  std::raise(SIGSEGV);
}
void h5_hang_now() {
  for (;;) ::pause();
}
void h5_allocate_without_end() {
  for (;;) {
    char* p = new char[64 << 10];  // small blocks: ASan's heap counts only as resident memory
    std::memset(p, 1, 64 << 10);
  }
}

class Hdf5CheckChild : public ::testing::TestWithParam<H5ChildFailure> {
 protected:
  void TearDown() override { H5File::check_hook_for_tests = nullptr; }
};

TEST_P(Hdf5CheckChild, BecomesOneError) {
  H5File::check_hook_for_tests = GetParam().hook;
  const std::string fixture =
      std::string(AUTOSHARD_TEST_DATA) + "/keras_files/batch_normalization_dense.h5";
  const auto start = std::chrono::steady_clock::now();
  try {
    H5File::open(fixture, "Keras file");
    ADD_FAILURE() << "opened";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("Keras file '" + fixture + "': the HDF5 file is damaged: libhdf5 "),
              std::string::npos)
        << message;
    EXPECT_NE(message.find(GetParam().needle), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 15);
  // The file opens as before once the child is left alone.
  H5File::check_hook_for_tests = nullptr;
  EXPECT_TRUE(H5File::open(fixture, "Keras file")->is_group("model_weights"));
}

INSTANTIATE_TEST_SUITE_P(
    Failures, Hdf5CheckChild,
    ::testing::Values(H5ChildFailure{"Crash", h5_crash_now, "crashed reading it (signal 11)"},
                      H5ChildFailure{"Hang", h5_hang_now, "did not finish reading it in 5 s"},
                      H5ChildFailure{"Memory", h5_allocate_without_end,
                                     "needed more than 512 MiB"}),
    [](const auto& info) { return std::string(info.param.name); });

// A child blocked at its start (a lock another thread held at the fork)
// is replaced by a new one: the hook blocks the first child only (it marks
// a file, which the next child finds), and the open succeeds, well before
// the 5 s deadline the blocked child alone would have reached.
std::string h5_block_marker;
void h5_block_first_child() {
  if (::open(h5_block_marker.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600) >= 0)
    for (;;) ::pause();
}

TEST(Hdf5CheckChild, AChildBlockedAtItsStartIsReplaced) {
  h5_block_marker =
      (fs::temp_directory_path() / ("h5_blocked_" + std::to_string(::getpid()))).string();
  fs::remove(h5_block_marker);
  H5File::check_hook_for_tests = h5_block_first_child;
  const std::string fixture =
      std::string(AUTOSHARD_TEST_DATA) + "/keras_files/batch_normalization_dense.h5";
  const auto start = std::chrono::steady_clock::now();
  auto file = H5File::open(fixture, "Keras file");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  H5File::check_hook_for_tests = nullptr;
  EXPECT_TRUE(fs::exists(h5_block_marker));  // the first child did block
  EXPECT_TRUE(file->is_group("model_weights"));
  EXPECT_LT(seconds, 4);
  fs::remove(h5_block_marker);
}

TEST(Hdf5Open, OpensWhileAnotherThreadRunsBlas) {
  // fork() would run OpenBLAS's pthread_atfork handler, which joins its
  // worker threads and never returns while another thread is inside a BLAS
  // call (a Python thread in NumPy, a device): the open hung for good.
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer builds fork with fork(), which TSan needs";
#endif
  std::atomic<bool> stop{false};
  std::thread blas([&stop] {
    std::vector<float> a(384 * 384, 1.0f), c(384 * 384);
    while (!stop)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 384, 384, 384, 1.0f, a.data(), 384,
                  a.data(), 384, 0.0f, c.data(), 384);
  });
  const std::string fixture = std::string(AUTOSHARD_TEST_DATA) + "/keras_files/resnet_cnn.h5";
  for (int i = 0; i < 20; ++i)
    EXPECT_TRUE(H5File::open(fixture, "Keras file")->is_group("model_weights"));
  stop = true;
  blas.join();
}

TEST(Hdf5Open, AFifoIsRefusedWithoutBlocking) {
  const fs::path dir = fs::temp_directory_path() / ("autoshard_h5fifo_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path fifo = dir / "model.h5";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  try {
    H5File::open(fifo.string(), "Keras file");
    ADD_FAILURE() << "opened a FIFO";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not a regular file"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace autoshard
