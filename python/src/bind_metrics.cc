// autoshard._native's metrics beyond the means bound in native.cc: Keras's
// confusion-matrix metrics, AUC, F-scores and R2 (nn/metrics.h), and a
// metric under another name (Keras logs a metric by the name it was given).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "autoshard/nn/metrics.h"
#include "autoshard/nn/model.h"

namespace py = pybind11;
using namespace py::literals;

namespace autoshard::python {

void bind_metrics(py::module_& m) {
  // An evaluation's running sums, carried across Model.evaluate calls (one
  // per batch when callbacks watch the batches).
  py::class_<Model::EvaluationSums>(m, "EvaluationSums").def(py::init<>());
  m.def(
      "metric_named",
      [](Metric metric, const std::string& name) {
        metric.name = name;
        return metric;
      },
      "metric"_a, "name"_a);
  m.def(
      "metric_confusion",
      [](const std::string& kind, std::optional<double> threshold, int top_k, int class_id) {
        const metrics::ConfusionOptions o{threshold, top_k, class_id};
        if (kind == "precision") return metrics::precision(o);
        if (kind == "recall") return metrics::recall(o);
        using metrics::ConfusionCell;
        const ConfusionCell cell = kind == "true_positives"    ? ConfusionCell::TruePositives
                                   : kind == "false_positives" ? ConfusionCell::FalsePositives
                                   : kind == "true_negatives"  ? ConfusionCell::TrueNegatives
                                                               : ConfusionCell::FalseNegatives;
        return metrics::confusion_count(cell, o);
      },
      "kind"_a, "threshold"_a, "top_k"_a, "class_id"_a);
  m.def(
      "metric_auc",
      [](int num_thresholds, const std::string& curve, const std::string& summation_method,
         bool multi_label, bool from_logits) {
        return metrics::auc({num_thresholds, curve, summation_method, multi_label, from_logits});
      },
      "num_thresholds"_a, "curve"_a, "summation_method"_a, "multi_label"_a, "from_logits"_a);
  m.def("metric_fbeta", &metrics::fbeta_score, "average"_a, "beta"_a, "threshold"_a);
  m.def("metric_r2", &metrics::r2_score, "class_aggregation"_a, "num_regressors"_a);
  m.def("metric_categorical_accuracy", &metrics::categorical_accuracy);
  m.def("metric_top_k_categorical_accuracy", &metrics::top_k_categorical_accuracy, "k"_a);
  m.def("metric_mape", &metrics::mean_absolute_percentage_error);
}

}  // namespace autoshard::python
