// autoshard.trace(path, steps=""): the timeline of the training steps run in
// a `with` block (runtime/timeline.h), written to `path` when the block ends,
// as `autoshard train --trace` writes it (under mpirun: path.rankN.json).
#include <pybind11/pybind11.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "autoshard/comm/world.h"
#include "autoshard/error.h"
#include "autoshard/runtime/timeline.h"

namespace py = pybind11;
using namespace pybind11::literals;

namespace autoshard::python {
namespace {

using autoshard::cat;

class PyTrace {
 public:
  PyTrace(const std::string& path, const std::string& steps)
      : timeline_(parse_timeline_steps(steps.empty() ? "1:" : steps, "steps")) {
    AS_CHECK(path.ends_with(".json"), "autoshard.trace: '", path,
             "' must end in .json (a Chrome Trace Event Format file for Perfetto)");
    const World& world = World::process();
    path_ = timeline_file_of_rank(path, world.rank(), world.distributed());
  }

  void enter() {
    AS_CHECK(!scope_, "autoshard.trace: this trace is already recording");
    scope_ = std::make_unique<TimelineScope>(timeline_);
  }
  // Ends the recording and writes the file (through a temporary: a failed
  // write leaves no half file).
  void exit() {
    scope_.reset();
    const World& world = World::process();
    const std::string process =
        world.distributed() ? cat("autoshard rank ", world.rank()) : std::string("autoshard");
    const std::string text = timeline_.document(world.rank(), process).dump();
    const std::string tmp = path_ + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      AS_CHECK(out.good(), "autoshard.trace: '", path_,
               "' cannot be written (is its directory there?)");
      out << text;
      out.close();
      AS_CHECK(out.good(), "autoshard.trace: writing '", path_, "' failed");
    }
    std::filesystem::rename(tmp, path_);
  }

  const std::string& path() const { return path_; }
  int64_t runs() const { return timeline_.runs(); }

 private:
  TimelineRecorder timeline_;
  std::unique_ptr<TimelineScope> scope_;
  std::string path_;
};

}  // namespace

void bind_trace(py::module_& m) {
  py::class_<PyTrace>(m, "Trace",
                      "with autoshard.trace('steps.json', steps='2:3'): model.fit(...) writes a "
                      "timeline of those steps for Perfetto")
      .def(py::init<const std::string&, const std::string&>(), "path"_a, "steps"_a = "")
      .def(
          "__enter__",
          [](PyTrace& t) -> PyTrace& {
            t.enter();
            return t;
          },
          py::return_value_policy::reference)
      .def("__exit__",
           [](PyTrace& t, const py::object&, const py::object&, const py::object&) {
             t.exit();
             return false;
           })
      .def_property_readonly("path", &PyTrace::path, "the file written (per rank under mpirun)")
      .def_property_readonly("runs", &PyTrace::runs, "compiled steps recorded so far");
}

}  // namespace autoshard::python
