// autoshard._native: the C++ API as a Python extension (pybind11). Thin on
// purpose: python/autoshard/keras maps Keras 3's names and arguments onto
// these functions, which only convert values and call the C++ API. The GIL
// is released while the engine runs; autoshard::Error becomes ValueError.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <ios>
#include <memory>
#include <new>
#include <optional>
#include <system_error>

#include "autoshard/error.h"
#include "autoshard/io/keras_layer.h"
#include "autoshard/json.h"
#include "autoshard/nn/callbacks.h"
#include "autoshard/nn/layers.h"
#include "autoshard/nn/losses.h"
#include "autoshard/nn/metrics.h"
#include "autoshard/nn/model.h"
#include "autoshard/optim/keras_optimizers.h"
#include "autoshard/plan/distribution.h"
#include "autoshard/runtime/memory.h"
#include "convert.h"
#include "py_model.h"

namespace py = pybind11;
using namespace py::literals;

namespace autoshard::python {
namespace {

DType dtype_from(const std::string& name) {
  if (name == "float32") return DType::F32;
  if (name == "int32" || name == "int64") return DType::I32;
  fail("dtype must be 'float32' or 'int32' (int64 ids are read as int32), not '", name, "'");
}

PyModel make_model(std::unique_ptr<Model> model, const std::vector<SymbolicTensor>& inputs) {
  PyModel m{std::move(model), {}, {}};
  for (const SymbolicTensor& s : inputs) {
    m.input_names.push_back(s.node().name);
    m.input_dtypes.push_back(s.node().dtype);
  }
  return m;
}

// {name: array} -> ModelInputs; one input goes under "" (the unnamed tensor).
// `borrow`: arrays are lent, not copied, where they can be (to_tensor): for
// fit, evaluate and predict, which copy their batches out of them.
ModelInputs inputs_of(const PyModel& m, const py::dict& x, bool borrow = false) {
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < m.input_names.size(); ++i) {
    const std::string& name = m.input_names[i];
    AS_CHECK(x.contains(name), "missing input '", name, "'");
    out[m.input_names.size() == 1 ? "" : name] =
        to_tensor(x[py::str(name)], m.input_dtypes[i], "input '" + name + "'", borrow);
  }
  AS_CHECK(x.size() == m.input_names.size(), "the model takes ", m.input_names.size(),
           " inputs, got ", x.size());
  return ModelInputs(std::move(out));
}

ModelTargets targets_of(const PyModel& m, const py::dict& y, bool borrow = false) {
  const std::vector<std::string> names = m.model->output_names();
  std::map<std::string, Tensor> out;
  for (const std::string& name : names) {
    AS_CHECK(y.contains(name), "missing targets for output '", name, "'");
    py::handle a = y[py::str(name)];
    out[names.size() == 1 ? "" : name] =
        to_tensor(a, target_dtype(a), "targets of '" + name + "'", borrow);
  }
  AS_CHECK(y.size() == names.size(), "the model has ", names.size(), " outputs, got targets for ",
           y.size());
  return ModelTargets(std::move(out));
}

// Ctrl-C between batches: Python's handler raises KeyboardInterrupt.
void stop_on_signal() {
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

// Each value of `d` as a NumPy array (converted once, sliced per batch).
py::dict arrays_of(const py::dict& d) {
  py::dict out;
  for (auto [k, v] : d) {
    py::array a = py::array::ensure(v);
    AS_CHECK(a, "'", std::string(py::str(k)),
             "' must be array-like (a NumPy array, a list of numbers)");
    AS_CHECK(a.ndim() >= 1, "'", std::string(py::str(k)),
             "' must have a batch dimension, got a scalar");
    out[k] = a;
  }
  return out;
}

// The examples in `xs` and `ys`: every array's first dimension, the same.
int64_t rows_of(const py::dict& xs, const py::dict& ys, const char* what) {
  int64_t n = -1;
  for (const py::dict* d : {&xs, &ys})
    for (auto [k, v] : *d) {
      const int64_t rows = v.cast<py::array>().shape(0);
      AS_CHECK(n < 0 || rows == n, what, ": x and y must have the same number of examples, got ", n,
               " and ", rows, " ('", std::string(py::str(k)), "')");
      n = rows;
    }
  AS_CHECK(n > 0, what, ": there are no examples (x has 0 rows)");
  return n;
}

// Rows [begin, end) of each array (NumPy views, no copy).
py::dict batch_of(const py::dict& arrays, int64_t begin, int64_t end) {
  py::dict out;
  const py::slice rows(begin, end, 1);
  for (auto [k, v] : arrays) out[k] = v[rows];
  return out;
}

// An uninitialized array of `t`'s dtype and shape, with `n` rows.
py::array rows_like(const Tensor& t, int64_t n) {
  AS_CHECK(t.rank() >= 1, "predict: an output of shape ", shape_str(t.shape()),
           " has no batch dimension");
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  shape[0] = n;
  if (t.dtype() == DType::I32) return py::array_t<int32_t>(shape);
  return py::array_t<float>(shape);
}

// Copies a batch's output `t` (`rows` of them) into rows [begin, begin +
// rows) of `out` (made by rows_like from the first batch's): the same dtype
// and shape past the batch dimension, checked before the copy.
void copy_rows(py::array& out, const Tensor& t, int64_t begin, int64_t rows) {
  const bool same_dtype = t.dtype() == DType::I32 ? out.dtype().is(py::dtype::of<int32_t>())
                                                  : out.dtype().is(py::dtype::of<float>());
  bool same_shape =
      t.rank() == out.ndim() && t.rank() >= 1 && t.dim(0) == rows && begin + rows <= out.shape(0);
  for (int i = 1; same_shape && i < t.rank(); ++i) same_shape = t.shape()[i] == out.shape(i);
  AS_CHECK(same_dtype && same_shape, "predict: a batch's output of shape ", shape_str(t.shape()),
           " does not continue the first batch's");
  const size_t row_bytes = t.nbytes() / size_t(rows);
  std::memcpy(static_cast<char*>(out.mutable_data()) + size_t(begin) * row_bytes, t.raw(),
              t.nbytes());
}

py::dict logs_dict(const Logs& logs) {
  py::dict d;
  for (const auto& [k, v] : logs) d[py::str(k)] = v;
  return d;
}

// Forwards fit()'s hooks to a Python object (autoshard.keras's callback
// list), with the GIL held; a Python exception stops fit and propagates.
class PyCallback : public Callback {
 public:
  PyCallback(py::object target, int epoch_offset)
      : target_(std::move(target)), offset_(epoch_offset) {}
  ~PyCallback() override {
    py::gil_scoped_acquire gil;
    target_ = py::object();
  }
  void on_train_begin() override { call("on_train_begin"); }
  void on_epoch_begin(int epoch, int64_t steps) override {
    call("on_epoch_begin", epoch + offset_, steps);
  }
  void on_train_batch_end(int64_t batch, const Logs& logs) override {
    py::gil_scoped_acquire gil;
    target_.attr("on_train_batch_end")(batch, logs_dict(logs));
    // Ctrl-C stops at this step boundary: Python's handler raises
    // KeyboardInterrupt, which leaves fit() like any callback's exception.
    stop_on_signal();
  }
  void on_epoch_end(int epoch, const Logs& logs) override {
    py::gil_scoped_acquire gil;
    target_.attr("on_epoch_end")(epoch + offset_, logs_dict(logs));
  }
  void on_train_end() override { call("on_train_end"); }

 private:
  template <typename... Args>
  void call(const char* name, Args... args) {
    py::gil_scoped_acquire gil;
    target_.attr(name)(args...);
  }
  py::object target_;
  int offset_;
};

// Keras's progress bar for one epoch of several fit() calls (shuffled fits
// run one epoch per call): the epoch shown is offset.
class OffsetBar : public Callback {
 public:
  OffsetBar(int offset, int total) : offset_(offset) { bar_.epochs = total; }
  void on_epoch_begin(int epoch, int64_t steps) override {
    bar_.on_epoch_begin(epoch + offset_, steps);
  }
  void on_train_batch_end(int64_t batch, const Logs& logs) override {
    bar_.on_train_batch_end(batch, logs);
  }
  void on_epoch_end(int epoch, const Logs& logs) override {
    bar_.on_epoch_end(epoch + offset_, logs);
  }

 private:
  ProgressBar bar_;
  int offset_;
};

// Symbolic tensors, Layer and the Keras layer table (keras_layer), which
// builds every stock Python layer class from its Keras 3 config.
void bind_layers(py::module_& m) {
  py::class_<SymbolicTensor>(m, "SymbolicTensor")
      .def_property_readonly("shape", [](const SymbolicTensor& s) { return s.node().shape; })
      .def_property_readonly("name", [](const SymbolicTensor& s) { return s.node().name; })
      .def_property_readonly("is_input", [](const SymbolicTensor& s) { return !s.node().layer; })
      .def_property_readonly(
          "dtype", [](const SymbolicTensor& s) { return std::string(dtype_name(s.node().dtype)); });
  m.def(
      "Input",
      [](const Shape& shape, const std::string& dtype, const std::string& name) {
        return Input(shape, dtype_from(dtype), name);
      },
      "shape"_a, "dtype"_a = "float32", "name"_a = "");

  py::class_<Layer>(m, "Layer")
      .def_property_readonly("name", &Layer::name)
      .def("__call__", [](const Layer& l, const SymbolicTensor& x) { return l(x); })
      .def("__call__", [](const Layer& l, const std::vector<SymbolicTensor>& xs) { return l(xs); })
      // A layer of several outputs (return_state): all of them.
      .def_property_readonly("output_count", &Layer::output_count)
      .def("outputs",
           [](const Layer& l, const std::vector<SymbolicTensor>& xs) { return l.outputs(xs); });
  // A layer from its Keras 3 config (JSON text) through the Keras layer
  // table the file readers use (autoshard/io/keras_layer.h).
  m.def(
      "keras_layer",
      [](const std::string& class_name, const std::string& config, uint64_t seed) {
        return keras_layer(class_name, parse_json_text(config, "keras.layers." + class_name), seed);
      },
      "class_name"_a, "config"_a, "seed"_a = 0);

  m.def("check_activation", &check_activation);
}

void bind_training(py::module_& m) {
  py::class_<Loss>(m, "Loss");
  m.def("loss_by_name", &losses::by_name);
  m.def(
      "loss",
      [](const std::string& kind, bool from_logits, double label_smoothing, double delta) -> Loss {
        if (kind == "sparse_categorical_crossentropy")
          return losses::SparseCategoricalCrossentropy({.from_logits = from_logits});
        if (kind == "categorical_crossentropy")
          return losses::CategoricalCrossentropy(
              {.from_logits = from_logits, .label_smoothing = label_smoothing});
        if (kind == "binary_crossentropy")
          return losses::BinaryCrossentropy(
              {.from_logits = from_logits, .label_smoothing = label_smoothing});
        if (kind == "huber") return losses::Huber(delta);
        return losses::by_name(kind);
      });
  py::class_<Metric>(m, "Metric").def_readonly("name", &Metric::name);
  m.def("metric_by_name", &metrics::by_name);
  m.def("binary_accuracy", &metrics::binary_accuracy);
  m.def("sparse_top_k_categorical_accuracy", &metrics::sparse_top_k_categorical_accuracy);

  py::class_<Optimizer, std::shared_ptr<Optimizer>>(m, "Optimizer")
      .def_readwrite("learning_rate", &Optimizer::learning_rate)
      .def_readwrite("clipnorm", &Optimizer::clipnorm);
  // Keras 3's optimizers (autoshard::optimizers), with Keras's defaults.
  m.def("optimizer_by_name", &optimizers::get);
  m.def("SGD", [](double lr, double momentum, bool nesterov, double clipnorm) {
    return optimizers::SGD({.learning_rate = lr,
                            .momentum = momentum,
                            .nesterov = nesterov,
                            .global_clipnorm = clipnorm});
  });
  m.def("Adam", [](double lr, double b1, double b2, double eps, double wd, double clipnorm) {
    return optimizers::Adam({.learning_rate = lr,
                             .beta_1 = b1,
                             .beta_2 = b2,
                             .epsilon = eps,
                             .weight_decay = wd,
                             .global_clipnorm = clipnorm});
  });
  m.def("AdamW", [](double lr, double b1, double b2, double eps, double wd, double clipnorm) {
    return optimizers::AdamW({.learning_rate = lr,
                              .beta_1 = b1,
                              .beta_2 = b2,
                              .epsilon = eps,
                              .weight_decay = wd,
                              .global_clipnorm = clipnorm});
  });
  m.def("RMSprop",
        [](double lr, double rho, double momentum, double eps, bool centered, double clipnorm) {
          return optimizers::RMSprop({.learning_rate = lr,
                                      .rho = rho,
                                      .momentum = momentum,
                                      .epsilon = eps,
                                      .centered = centered,
                                      .global_clipnorm = clipnorm});
        });
  m.def("Adagrad", [](double lr, double initial, double eps, double clipnorm) {
    return optimizers::Adagrad({.learning_rate = lr,
                                .initial_accumulator_value = initial,
                                .epsilon = eps,
                                .global_clipnorm = clipnorm});
  });
}

void bind_distribution(py::module_& m) {
  py::class_<DeviceMesh>(m, "DeviceMesh")
      .def(py::init<std::vector<int>, std::vector<std::string>>(), "shape"_a, "axis_names"_a)
      .def_property_readonly("shape", &DeviceMesh::shape)
      .def_property_readonly("axis_names", &DeviceMesh::axis_names)
      .def_property_readonly("size", &DeviceMesh::size)
      .def("__repr__", &DeviceMesh::to_string);
  m.def("list_devices", &list_devices, "count"_a = 0);
  // The memory a run may count on (AUTOSHARD_MEMORY_LIMIT caps it), or None:
  // Python's checks before it asks for memory (Model.build).
  m.def("available_memory_bytes", &available_memory_bytes);

  using Axes = std::vector<TensorLayout::Axes>;  // names per dimension (none: whole)
  py::class_<LayoutMap>(m, "LayoutMap")
      .def(py::init([](const std::vector<std::pair<std::string, Axes>>& entries) {
        LayoutMap map;
        for (const auto& [key, axes] : entries) map[key] = TensorLayout(axes);
        return map;
      }))
      .def("lookup", [](const LayoutMap& map, const std::string& path) -> std::optional<Axes> {
        std::optional<TensorLayout> l = map.lookup(path);
        if (!l) return std::nullopt;
        return l->axes;
      });

  py::class_<Distribution, std::shared_ptr<Distribution>>(m, "Distribution")
      .def_property_readonly("mesh", &Distribution::mesh)
      .def_property_readonly("batch_dim_name", &Distribution::batch_dim_name);
  m.def("DataParallel", [](const DeviceMesh& mesh, const std::string& batch_dim_name) {
    return std::shared_ptr<Distribution>(std::make_shared<DataParallel>(mesh, batch_dim_name));
  });
  m.def("ModelParallel",
        [](const DeviceMesh& mesh, const LayoutMap& map, const std::string& batch_dim_name) {
          return std::shared_ptr<Distribution>(
              std::make_shared<ModelParallel>(mesh, map, batch_dim_name));
        });
  m.def("AutoShard", [](const DeviceMesh& mesh, const std::string& batch_dim_name,
                        const std::string& cluster, double memory_per_device) {
    AutoShardOptions o;
    o.cluster = cluster;
    o.memory_per_device = memory_per_device;
    return std::shared_ptr<Distribution>(std::make_shared<AutoShard>(mesh, batch_dim_name, o));
  });
  m.def("set_distribution", &set_distribution);
  m.def("distribution", &distribution);
}

// Model's per-batch and weight methods (evaluate, predict, train_on_batch,
// weights, summary).
void bind_model_batches(py::class_<PyModel>& model) {
  using Release = py::call_guard<py::gil_scoped_release>;
  model
      // evaluate and predict run one batch per engine call, so that Ctrl-C
      // (Python's handler, run by PyErr_CheckSignals) stops them between
      // batches as it stops fit.
      .def(
          "evaluate",
          [](PyModel& p, const py::dict& x, const py::dict& y, int64_t batch_size,
             Model::EvaluationSums* running) {
            AS_CHECK(batch_size >= 1, "evaluate: batch_size must be at least 1, got ", batch_size);
            const py::dict xs = arrays_of(x), ys = arrays_of(y);
            const int64_t n = rows_of(xs, ys, "evaluate");
            // Sums over every batch (and over earlier calls given `running`):
            // the whole set's loss and metrics, not a mean of the batches'.
            Model::EvaluationSums own;
            Model::EvaluationSums& sums = running ? *running : own;
            for (int64_t begin = 0; begin < n; begin += batch_size) {
              const int64_t end = std::min(n, begin + batch_size);
              ModelInputs in = inputs_of(p, batch_of(xs, begin, end), true);
              ModelTargets tg = targets_of(p, batch_of(ys, begin, end), true);
              {
                py::gil_scoped_release release;
                p.model->evaluate_part(in, tg, batch_size, sums);
              }
              stop_on_signal();
            }
            return logs_dict(Model::evaluation_logs(sums));
          },
          "x"_a, "y"_a, "batch_size"_a, "running"_a = nullptr)
      .def("predict",
           [](PyModel& p, const py::dict& x, int64_t batch_size) {
             AS_CHECK(batch_size >= 1, "predict: batch_size must be at least 1, got ", batch_size);
             const py::dict xs = arrays_of(x);
             const int64_t n = rows_of(xs, py::dict(), "predict");
             std::vector<py::array> outs;  // made at the first batch, filled batch by batch
             for (int64_t begin = 0; begin < n; begin += batch_size) {
               const int64_t end = std::min(n, begin + batch_size);
               ModelInputs in = inputs_of(p, batch_of(xs, begin, end), true);
               std::vector<Tensor> part;
               {
                 py::gil_scoped_release release;
                 part = p.model->predict_outputs(in, batch_size);
               }
               if (outs.empty())
                 for (const Tensor& t : part) outs.push_back(rows_like(t, n));
               AS_CHECK(part.size() == outs.size(), "predict: a batch gave ", part.size(),
                        " outputs, the first ", outs.size());
               for (size_t k = 0; k < part.size(); ++k)
                 copy_rows(outs[k], part[k], begin, end - begin);
               stop_on_signal();
             }
             py::list l;
             for (const py::array& a : outs) l.append(a);
             return l;
           })
      .def("train_on_batch",
           [](PyModel& p, const py::dict& x, const py::dict& y) {
             ModelInputs in = inputs_of(p, x);
             ModelTargets tg = targets_of(p, y);
             py::gil_scoped_release release;
             return p.model->train_on_batch(in, tg);
           })
      .def("test_on_batch",
           [](PyModel& p, const py::dict& x, const py::dict& y) {
             ModelInputs in = inputs_of(p, x);
             ModelTargets tg = targets_of(p, y);
             py::gil_scoped_release release;
             return p.model->test_on_batch(in, tg);
           })
      .def(
          "weight_paths", [](PyModel& p) { return p.model->weight_paths(); }, Release())
      .def(
          "non_trainable_weight_paths",
          [](PyModel& p) { return p.model->non_trainable_weight_paths(); }, Release())
      .def("get_weight",
           [](PyModel& p, const std::string& path) {
             Tensor t;
             {
               py::gil_scoped_release release;
               t = p.model->gather_weight(path);
             }
             return to_numpy(t);
           })
      .def("weight_shape",
           [](PyModel& p, const std::string& path) {
             py::gil_scoped_release release;
             return p.model->gather_weight(path).shape();
           })
      .def("set_weight",
           [](PyModel& p, const std::string& path, const py::handle& value) {
             Tensor t = to_tensor(value, DType::F32, "weight '" + path + "'");
             py::gil_scoped_release release;
             p.model->set_weight(path, t);
           })
      .def(
          "count_params", [](PyModel& p) { return p.model->count_params(); }, Release())
      .def(
          "summary", [](PyModel& p) { return p.model->summary(); }, Release());
}

void bind_model(py::module_& m) {
  py::class_<PyModel> model(m, "Model");
  model
      .def_static("functional",
                  [](const std::vector<SymbolicTensor>& inputs,
                     const std::vector<SymbolicTensor>& outputs, const std::string& name) {
                    return make_model(std::make_unique<Model>(inputs, outputs, name), inputs);
                  })
      .def_static("sequential",
                  [](const SymbolicTensor& input, const std::vector<Layer>& layers,
                     const std::string& name) {
                    return make_model(std::make_unique<Sequential>(input, layers, name), {input});
                  })
      .def_readonly("input_names", &PyModel::input_names)
      .def_property_readonly("name", [](const PyModel& p) { return p.model->name(); })
      .def_property_readonly("output_names",
                             [](const PyModel& p) { return p.model->output_names(); })
      .def("compile",
           [](PyModel& p, std::shared_ptr<Optimizer> opt, std::vector<Loss> losses,
              std::vector<double> loss_weights, std::vector<Metric> metrics) {
             p.model->compile(std::move(opt), std::move(losses), std::move(loss_weights),
                              std::move(metrics));
           })
      .def("set_seed", [](PyModel& p, uint64_t seed) { p.model->set_seed(seed); })
      // Keras's trainable = False: the scopes (layer names) whose weights
      // take no gradient; Python sets them at compile (Keras 3's rule).
      .def(
          "set_frozen",
          [](PyModel& p, std::set<std::string> scopes) { p.model->set_frozen(std::move(scopes)); },
          py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("frozen", [](const PyModel& p) { return p.model->frozen(); })
      .def(
          "fit",
          [](PyModel& p, const py::dict& x, const py::dict& y, int64_t batch_size, int epochs,
             bool verbose, const py::object& hooks, int epoch_offset, int total_epochs) {
            ModelInputs in = inputs_of(p, x, true);
            ModelTargets tg = targets_of(p, y, true);
            FitOptions o{.batch_size = batch_size, .epochs = epochs, .verbose = false};
            if (verbose)
              o.callbacks.push_back(std::make_shared<OffsetBar>(epoch_offset, total_epochs));
            if (!hooks.is_none())
              o.callbacks.push_back(std::make_shared<PyCallback>(hooks, epoch_offset));
            History h;
            {
              py::gil_scoped_release release;
              h = p.model->fit(in, tg, std::move(o));
            }
            py::dict out;
            out["loss"] = h.loss;
            for (const auto& [k, v] : h.metrics) out[py::str(k)] = v;
            return out;
          },
          "x"_a, "y"_a, "batch_size"_a, "epochs"_a, "verbose"_a, "hooks"_a, "epoch_offset"_a,
          "total_epochs"_a);
  bind_model_batches(model);
}

// OSError(errno, message[, path]): Python picks the subclass of the errno.
void set_os_error(int code, const std::string& message, const std::string& path) {
  py::object args =
      path.empty() ? py::make_tuple(code, message) : py::make_tuple(code, message, path);
  PyErr_SetObject(PyExc_OSError, args.ptr());
}

void translate_engine_error(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const py::error_already_set&) {
    throw;  // a Python exception (a callback's, KeyboardInterrupt): as it was
  } catch (const py::builtin_exception&) {
    throw;  // pybind11's own (cast errors and the like)
  } catch (const std::filesystem::filesystem_error& e) {
    set_os_error(e.code().value(), e.code().message(), e.path1().string());
  } catch (const std::ios_base::failure& e) {
    PyErr_SetString(PyExc_OSError, e.what());
  } catch (const std::system_error& e) {
    if (e.code().category() == std::generic_category() ||
        e.code().category() == std::system_category())
      set_os_error(e.code().value(), e.what(), "");
    else
      PyErr_SetString(PyExc_OSError, e.what());
  } catch (const std::bad_alloc&) {
    PyErr_SetString(PyExc_MemoryError, "out of memory in autoshard's engine");
  } catch (const std::exception& e) {
    // autoshard::Error, and anything else the engine lets through (a JSON
    // library's type error, std::out_of_range): the input was refused.
    PyErr_SetString(PyExc_ValueError, e.what());
  }
}

}  // namespace

void bind_saving(py::module_& m);          // bind_saving.cc
void bind_progress(py::module_& m);        // bind_progress.cc
void bind_hf(py::module_& m);              // bind_hf.cc
void bind_plan(py::module_& m);            // bind_plan.cc
void bind_layout_map(py::module_& m);      // bind_layout_map.cc
void bind_keras_hub(py::module_& m);       // bind_keras_hub.cc
void bind_trace(py::module_& m);           // bind_trace.cc
void bind_blas(py::module_& m);            // bind_blas.cc
void bind_schedules(py::module_& m);       // bind_schedules.cc
void bind_metrics(py::module_& m);         // bind_metrics.cc
void bind_ops(py::module_& m);             // bind_ops.cc
void bind_weights_file(py::module_& m);    // bind_weights_file.cc
void bind_regularizers(py::module_& m);    // bind_regularizers.cc
void bind_sample_weights(py::module_& m);  // bind_sample_weights.cc
}  // namespace autoshard::python

PYBIND11_MODULE(_native, m) {
  using namespace autoshard::python;
  m.doc() = "autoshard's C++ engine (use autoshard and autoshard.keras instead)";
  // The C++ API's one error type carries one-line messages naming the
  // argument and the fix: bad arguments and shapes are ValueErrors; the file
  // system's errors are OSErrors of their errno (FileNotFoundError, ...).
  // Nothing the engine throws reaches Python as a RuntimeError.
  // (Local: other extensions' exceptions are theirs to translate.)
  py::register_local_exception_translator(translate_engine_error);
  bind_layers(m);
  bind_training(m);
  bind_distribution(m);
  bind_model(m);
  bind_saving(m);
  bind_progress(m);
  bind_hf(m);
  bind_plan(m);
  bind_layout_map(m);
  bind_keras_hub(m);
  bind_trace(m);
  bind_blas(m);
  bind_schedules(m);
  bind_metrics(m);
  bind_ops(m);
  bind_weights_file(m);
  bind_regularizers(m);
  bind_sample_weights(m);
}
