// The model object the bindings hand to Python (autoshard._native.Model):
// the C++ Model with what is needed to convert its inputs. Shared by the
// bind_*.cc files that take a model (plans, saving).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "autoshard/nn/model.h"

namespace autoshard::python {

struct PyModel {
  std::unique_ptr<Model> model;
  std::vector<std::string> input_names;
  std::vector<DType> input_dtypes;
};

}  // namespace autoshard::python
