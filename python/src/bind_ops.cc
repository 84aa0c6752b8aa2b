// The traced side of autoshard.keras.ops and of custom layers: a Value (one
// tensor of the Graph being traced) and the Trace it belongs to, the tracing
// builders of autoshard/ir/ops.h on Values, and PyLayer, a layer whose call
// is a Python function run while the engine traces its step graph.
//
// The engine traces with the GIL released (fit, predict and the weight
// queries release it), so PyLayer's call takes it back for the Python code;
// a Python exception raised there leaves the trace and reaches the caller
// as it was raised.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "autoshard/nn/initializer.h"
#include "autoshard/nn/layers.h"
#include "autoshard/nn/losses.h"
#include "autoshard/nn/metrics.h"
#include "autoshard/nn/trace.h"
#include "convert.h"

namespace py = pybind11;
using namespace pybind11::literals;

namespace autoshard::python {
namespace {

// A layer whose call runs `fn(trace, inputs)` (Python), which returns the
// output Value. `fn` is held with the GIL: the layer may be released by the
// engine with it released.
class PyLayerImpl : public LayerImpl {
 public:
  PyLayerImpl(std::string name, py::object fn) : LayerImpl(std::move(name)), fn_(std::move(fn)) {}
  ~PyLayerImpl() override {
    py::gil_scoped_acquire gil;
    fn_ = py::object();
  }
  Value call(Trace& trace, const std::vector<Value>& inputs) override {
    py::gil_scoped_acquire gil;
    py::object out = fn_(py::cast(&trace, py::return_value_policy::reference), inputs);
    AS_CHECK(py::isinstance<Value>(out), "layer '", name(),
             "': call must return one tensor (computed from its inputs)");
    return out.cast<Value>();
  }

 private:
  py::object fn_;
};

UnaryFn unary_fn(const std::string& name) {
  for (int i = 0; i <= int(UnaryFn::SoftCap); ++i)
    if (name == unary_name(UnaryFn(i))) return UnaryFn(i);
  fail("unknown elementwise function '", name, "'");
}

// Keras's initializers by kind, with their arguments (a, b: see Initializer;
// mode and distribution: VarianceScaling's).
Initializer initializer_of(const std::string& kind, double a, double b, const std::string& mode,
                           const std::string& distribution) {
  if (kind == "constant") return Initializer::constant(a);
  if (kind == "random_normal") return Initializer::normal(a, b);
  if (kind == "random_uniform") return Initializer::uniform(a, b);
  if (kind == "truncated_normal") return Initializer::truncated_normal(a, b);
  if (kind == "orthogonal") return Initializer::orthogonal(a);
  if (kind == "identity") return Initializer::identity(a);
  if (kind == "variance_scaling")
    return Initializer::variance_scaling(a, Initializer::fan_mode(mode),
                                         Initializer::distribution_of(distribution));
  return Initializer::from_name(kind);
}

// keras.initializers' objects hold one of these; a name (a str) converts
// implicitly, so the stock layers' bindings take either.
void bind_initializer(py::module_& m) {
  py::class_<Initializer>(m, "Initializer")
      .def(py::init(&initializer_of), "kind"_a, "a"_a = 0.0, "b"_a = 0.0, "mode"_a = "fan_in",
           "distribution"_a = "truncated_normal")
      .def(py::init(&Initializer::from_name), "name"_a)
      // The values a weight at `path` of `shape` starts with under `seed`
      // (what keras.initializers' __call__ returns).
      .def(
          "draw",
          [](const Initializer& init, const Shape& shape, uint64_t seed, const std::string& path) {
            Tensor t;
            {
              py::gil_scoped_release release;
              t = init.make(path, shape, seed);
            }
            return to_numpy(t);
          },
          "shape"_a, "seed"_a = 0, "path"_a = "initializer");
  py::implicitly_convertible<py::str, Initializer>();
}

void bind_values(py::module_& m) {
  py::class_<Value>(m, "Value")
      .def_property_readonly("shape", [](const Value& v) { return v.shape(); })
      .def_property_readonly("dtype",
                             [](const Value& v) { return std::string(dtype_name(v.dtype())); });
  py::class_<Trace>(m, "GraphTrace")
      .def_property_readonly("training", &Trace::training)
      .def_property_readonly("seed", &Trace::seed)
      .def("path", &Trace::path)
      // Keras's layer.add_loss: a scalar the training (and evaluation) loss adds.
      .def("add_loss", &Trace::add_loss)
      // The terms added so far in this trace (add_loss, and in training
      // and evaluation the regularizers' penalties).
      .def("losses", &Trace::losses)
      // Keras's masks (nn/masking.h): a value's mask (f32 [batch, time], 1
      // where a step counts), None without one; set_mask gives one.
      .def("mask",
           [](const Trace& t, Value v) -> std::optional<Value> {
             Value m = t.mask(v);
             if (!m.valid()) return std::nullopt;
             return m;
           })
      .def("set_mask", &Trace::set_mask)
      .def(
          "weight",
          [](Trace& t, const std::string& name, const Shape& shape, const Initializer& init,
             bool trainable) { return t.weight(name, shape, init, trainable); },
          "name"_a, "shape"_a, "initializer"_a, "trainable"_a = true);
  m.def("PyLayer", [](const std::string& name, py::object fn) {
    return Layer(std::make_shared<PyLayerImpl>(name, std::move(fn)));
  });
  // A loss whose value is `fn(trace, predictions, targets)` (Python, with
  // the GIL; a Trace of the loss's graph for its constants).
  m.def("PyLoss", [](py::object fn) -> Loss {
    std::shared_ptr<py::object> held(new py::object(std::move(fn)), [](py::object* o) {
      py::gil_scoped_acquire gil;
      delete o;
    });
    return [held](Value predictions, Value targets) {
      py::gil_scoped_acquire gil;
      Trace trace(*predictions.graph, true, 0);
      py::object out =
          (*held)(py::cast(&trace, py::return_value_policy::reference), predictions, targets);
      AS_CHECK(py::isinstance<Value>(out), "a custom loss must return a tensor");
      return out.cast<Value>();
    };
  });
  // A metric whose batch sums are `fn(targets, predictions)` -> (sum, count)
  // (Python, with the GIL, on NumPy arrays); its value is sum / count over
  // the epoch's batches (Keras's MeanMetricWrapper).
  m.def("PyMetric", [](const std::string& name, py::object fn) {
    std::shared_ptr<py::object> held(new py::object(std::move(fn)), [](py::object* o) {
      py::gil_scoped_acquire gil;
      delete o;
    });
    Metric metric;
    metric.name = name;
    metric.accumulate = [held](const Tensor& predictions, const Tensor& targets) {
      py::gil_scoped_acquire gil;
      py::tuple sums = (*held)(to_numpy(targets), to_numpy(predictions));
      return Metric::Sums{sums[0].cast<double>(), sums[1].cast<double>()};
    };
    metric.result = [](const Metric::Sums& s) { return s[1] > 0 ? s[0] / s[1] : 0.0; };
    metric.mean = true;  // a masked output's masked steps are left out
    return metric;
  });
  // A keras.metrics.Metric subclass: `update(targets, predictions)`
  // (Python, with the GIL, on NumPy arrays) returns one batch's state
  // variables, flattened; the engine adds them over the epoch's batches and
  // `result(sums)` gives the metric of the summed state.
  m.def("PyStatefulMetric", [](const std::string& name, py::object update, py::object result) {
    auto hold = [](py::object o) {
      return std::shared_ptr<py::object>(new py::object(std::move(o)), [](py::object* p) {
        py::gil_scoped_acquire gil;
        delete p;
      });
    };
    std::shared_ptr<py::object> up = hold(std::move(update)), res = hold(std::move(result));
    Metric metric;
    metric.name = name;
    metric.accumulate = [up](const Tensor& predictions, const Tensor& targets) {
      py::gil_scoped_acquire gil;
      return (*up)(to_numpy(targets), to_numpy(predictions)).cast<Metric::Sums>();
    };
    metric.result = [res](const Metric::Sums& sums) {
      py::gil_scoped_acquire gil;
      return (*res)(sums).cast<double>();
    };
    return metric;
  });
  m.def("default_layer_name", &default_layer_name);
  // A stock layer called inside a custom layer's call: traced under its own
  // name scope, inside the caller's.
  m.def("call_layer", [](const Layer& layer, Trace& trace, const std::vector<Value>& inputs) {
    return layer(trace, inputs);
  });
}

// The builders of autoshard/ir/ops.h, one to one (autoshard.keras.ops
// composes Keras's operations from them).
void bind_builders(py::module_& m) {
  py::module_ t = m.def_submodule("traced", "the tracing builders of autoshard/ir/ops.h");
  t.def("einsum", &ops::einsum);
  t.def("add", &ops::add);
  t.def("sub", &ops::sub);
  t.def("mul", &ops::mul);
  t.def("div", &ops::div);
  t.def("scale", &ops::scale);
  t.def("constant", [](Trace& trace, const Shape& shape, double v) {
    return ops::constant(trace.graph(), shape, v);
  });
  t.def("iota", [](Trace& trace, const Shape& shape) { return ops::iota(trace.graph(), shape); });
  t.def("gelu", &ops::gelu);
  t.def("relu", &ops::relu);
  t.def("tanh", &ops::tanh);
  t.def("silu", &ops::silu);
  t.def("sigmoid", &ops::sigmoid);
  t.def("unary", [](const Value& x, const std::string& fn, double alpha) {
    return ops::unary(x, unary_fn(fn), alpha);
  });
  t.def("softmax", [](const Value& x) { return ops::softmax(x); });
  t.def("log_softmax", &ops::log_softmax);
  // A Keras activation by name (keras.activations' functions on traced tensors).
  t.def("activation", &apply_activation);
  t.def("reduce_sum", &ops::reduce_sum);
  t.def("broadcast_to", &ops::broadcast_to);
  t.def("reshape", &ops::reshape);
  t.def("transpose", &ops::transpose);
  t.def("gather", [](const Value& table, const Value& ids) { return ops::gather(table, ids); });
  // A table of `shape` (zeros) with each row of `values` [ids..., rest]
  // added at its id (i32): Gather's adjoint.
  t.def("scatter_add", [](const Value& ids, const Value& values, const Shape& shape) {
    return ids.graph->add(Op::ScatterAdd, {ids, values}, ScatterAddAttrs{shape, {}, 0});
  });
  t.def("pad", &ops::pad);
  t.def("concat", &ops::concat);
  t.def("normalize", &ops::normalize);
  t.def("dropout", &ops::dropout);
  // The largest element over the last axis, taking no gradient.
  t.def("row_max", [](const Value& x) { return x.graph->add(Op::RowMax, {x}); });
  // dy where x > 0, else 0 (numpy broadcasting): comparisons are built on it.
  t.def("relu_grad", [](const Value& x, const Value& dy) {
    return x.graph->add(Op::ReluGrad, {x, dy});
  });
}

}  // namespace

void bind_ops(py::module_& m) {
  bind_initializer(m);
  bind_values(m);
  bind_builders(m);
}

}  // namespace autoshard::python
