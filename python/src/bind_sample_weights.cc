// autoshard._native's sample-weighted losses and metrics (fit's
// sample_weight and class_weight, compile's weighted_metrics), whose
// targets carry the weights (autoshard/nn/sample_weights.h); Python packs
// them (python/autoshard/keras/_sample_weights.py).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "autoshard/nn/sample_weights.h"
#include "py_model.h"

namespace py = pybind11;

namespace autoshard::python {

void bind_sample_weights(py::module_& m) {
  m.def("sample_weighted_loss",
        [](const std::string& kind, bool from_logits, double label_smoothing, double delta) {
          return losses::sample_weighted(
              kind, {.from_logits = from_logits, .label_smoothing = label_smoothing}, delta);
        });
  m.def("metric_without_weights", &metrics::without_weights);
  m.def("renamed_metric", [](Metric metric, const std::string& name) {
    metric.name = name;
    return metric;
  });
  // The (first) output's shape for a batch of one: its classes, for class
  // ids packed one-hot.
  m.def("first_output_shape", [](PyModel& p) {
    Graph g;
    return p.model->trace_forward(g, 1, false).shape();
  });
  // `name`: the name it is logged under (Keras's "weighted_<name>" when an
  // unweighted metric has its name); empty keeps the metric's.
  m.def("sample_weighted_metric", [](Metric metric, bool class_ids, const std::string& name) {
    Metric weighted = metrics::sample_weighted(std::move(metric), class_ids);
    if (!name.empty()) weighted.name = name;
    return weighted;
  });
}

}  // namespace autoshard::python
