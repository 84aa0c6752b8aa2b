#include "cli/keras_data.h"

#include <algorithm>
#include <cstring>

#include "autoshard/error.h"
#include "autoshard/io/npy.h"
#include "autoshard/tensor/array_split.h"

namespace autoshard::cli {
namespace {

// "(None, 28, 28, 1)": a batch of examples of `shape`, as Keras prints it.
std::string batch_shape_str(const Shape& shape) {
  std::string out = "(None";
  for (int64_t d : shape) out += ", " + (d < 0 ? std::string("None") : std::to_string(d));
  return out + ")";
}

std::string names_of(const std::vector<KerasTensorSpec>& specs) {
  std::string out;
  for (const KerasTensorSpec& s : specs) out += (out.empty() ? "" : ", ") + s.name;
  return out;
}

// The arrays of `path` matched to `specs` by name: an .npy only for one
// spec, an .npz keyed by the specs' names (or holding one array for one).
std::vector<std::pair<const KerasTensorSpec*, NpyArray>> match(
    const std::vector<KerasTensorSpec>& specs, std::map<std::string, NpyArray> arrays,
    const std::string& path, const std::string& flag, const char* kind) {
  const std::string where = cat(flag, " '", path, "'");
  std::vector<std::pair<const KerasTensorSpec*, NpyArray>> out;
  if (specs.size() == 1 && arrays.size() == 1) {  // np.save, or np.savez's "arr_0"
    out.emplace_back(&specs[0], std::move(arrays.begin()->second));
    return out;
  }
  AS_CHECK(!arrays.contains(""), where, " is one array (.npy) but the model has ", specs.size(),
           " ", kind, "s (", names_of(specs), "): give an .npz with one array per ", kind,
           ", keyed by name (np.savez(file, ", specs[0].name, "=...))");
  for (const KerasTensorSpec& spec : specs) {
    auto it = arrays.find(spec.name);
    AS_CHECK(it != arrays.end(), where, " has no array '", spec.name, "' for the model's ", kind,
             " of that name (its ", kind, "s: ", names_of(specs), ")");
    out.emplace_back(&spec, std::move(it->second));
    arrays.erase(it);
  }
  AS_CHECK(arrays.empty(), where, " holds array '", arrays.empty() ? "" : arrays.begin()->first,
           "', which is no ", kind, " of the model (its ", kind, "s: ", names_of(specs), ")");
  return out;
}

// Throws unless `array` is a batch of examples shaped `example` (-1: any).
void check_shape(const Tensor& array, const Shape& example, const std::string& where,
                 const std::string& role) {
  bool ok = array.rank() == static_cast<int>(example.size()) + 1;
  for (size_t a = 0; ok && a < example.size(); ++a)
    ok = example[a] < 0 || example[a] == array.shape()[a + 1];
  AS_CHECK(ok, where, ": ", role, " takes batches of shape ", batch_shape_str(example),
           " but the array's shape is ", shape_str(array.shape()));
}

std::string member_where(const std::string& flag, const std::string& path, const std::string& name,
                         size_t count) {
  return cat(flag, " '", path, "'", count > 1 ? cat(" array '", name, "'") : "");
}

bool is_sparse_loss(const std::string& loss) {
  return loss.find("sparse") != std::string::npos;
}

}  // namespace

NamedArrays read_keras_inputs(const KerasModel& model, const std::string& path,
                              const std::string& flag) {
  return keras_inputs_of(model, read_arrays(path, flag), path, flag);
}

std::map<std::string, Shape> example_shapes(const std::map<std::string, NpyArray>& arrays) {
  std::map<std::string, Shape> out;
  for (const auto& [name, array] : arrays)
    if (array.tensor.rank() >= 1)
      out[arrays.size() == 1 ? "" : name] =
          Shape(array.tensor.shape().begin() + 1, array.tensor.shape().end());
  return out;
}

NamedArrays keras_inputs_of(const KerasModel& model, std::map<std::string, NpyArray> arrays,
                            const std::string& path, const std::string& flag) {
  NamedArrays out;
  for (auto& [spec, array] : match(model.inputs, std::move(arrays), path, flag, "input")) {
    const std::string where = member_where(flag, path, spec->name, model.inputs.size());
    check_shape(array.tensor, spec->shape, where, cat("input '", spec->name, "'"));
    out[model.inputs.size() == 1 ? "" : spec->name] = npy_as(array, spec->dtype, where);
  }
  return out;
}

NamedArrays read_keras_targets(const KerasModel& model, const std::vector<std::string>& losses,
                               const std::string& path, const std::string& flag) {
  NamedArrays out;
  for (auto& [spec, array] : match(model.outputs, read_arrays(path, flag), path, flag, "output")) {
    const size_t k = static_cast<size_t>(spec - model.outputs.data());
    const std::string loss = losses.empty() ? "" : losses.size() == 1 ? losses[0] : losses.at(k);
    const std::string where = member_where(flag, path, spec->name, model.outputs.size());
    const std::string role = cat("output '", spec->name, "'", loss.empty() ? "" : " with loss ",
                                 loss.empty() ? "" : loss);
    Tensor t = array.tensor;
    Shape example = spec->shape;
    if (example.empty()) {  // unknown: converted only
      const bool sparse = is_sparse_loss(loss);
      if (sparse && t.rank() == 2 && t.shape()[1] == 1) t = t.reshaped({t.dim(0)});
      out[model.outputs.size() == 1 ? "" : spec->name] =
          npy_as({t, array.stored}, sparse ? DType::I32 : DType::F32, where);
      continue;
    }
    if (is_sparse_loss(loss)) {  // class ids: the output's shape without its class axis
      AS_CHECK(!example.empty(), where, ": ", role, " needs an output with a class axis");
      const int64_t classes = example.back();
      example.pop_back();
      if (t.rank() == static_cast<int>(example.size()) + 2 && t.shape().back() == 1) {
        Shape s = t.shape();  // (N, 1) labels, as Keras takes them
        s.pop_back();
        t = t.reshaped(s);
      }
      check_shape(t, example, where, role);
      t = npy_as({t, array.stored}, DType::I32, where);
      for (int64_t i = 0; classes > 0 && i < t.numel(); ++i)
        AS_CHECK(t.i32()[i] >= 0 && t.i32()[i] < classes, where, ": class id ", t.i32()[i],
                 " at flat element ", i, " is outside the output's ", classes, " classes [0, ",
                 classes, ")");
    } else {
      if (t.rank() == static_cast<int>(example.size()) && !example.empty() &&
          example.back() == 1) {  // (N,) targets of a one-unit output
        Shape s = t.shape();
        s.push_back(1);
        t = t.reshaped(s);
      }
      check_shape(t, example, where, role);
      t = npy_as({t, array.stored}, DType::F32, where);
    }
    out[model.outputs.size() == 1 ? "" : spec->name] = t;
  }
  return out;
}

void infer_output_shapes(KerasModel& model) {
  if (model.outputs.size() != 1 || !model.outputs[0].shape.empty()) return;
  for (const KerasTensorSpec& in : model.inputs)
    for (int64_t d : in.shape)
      if (d < 0) return;  // a None dimension: nothing to trace with
  Graph graph;
  const Value out = model.model->trace_forward(graph, 1, false);
  model.outputs[0].shape.assign(out.shape().begin() + 1, out.shape().end());
}

int64_t example_count(const NamedArrays& arrays, const std::string& what) {
  int64_t n = -1;
  std::string first;
  for (const auto& [name, t] : arrays) {
    AS_CHECK(t.rank() >= 1, what, ": array '", name, "' has no batch dimension");
    AS_CHECK(n < 0 || t.dim(0) == n, what, ": arrays '", first, "' and '", name,
             "' hold different numbers of examples (", n, " and ", t.dim(0), ")");
    if (n < 0) n = t.dim(0), first = name;
  }
  AS_CHECK(n > 0, what, " holds no examples");
  return n;
}

NamedArrays take_rows(const NamedArrays& arrays, const std::vector<int64_t>& indices) {
  NamedArrays out;
  for (const auto& [name, t] : arrays) {
    Shape shape = t.shape();
    shape[0] = static_cast<int64_t>(indices.size());
    Tensor batch(shape, t.dtype());
    const size_t row = t.dim(0) ? t.nbytes() / static_cast<size_t>(t.dim(0)) : 0;
    const char* from = static_cast<const char*>(t.raw());
    char* to = static_cast<char*>(batch.raw());
    for (size_t i = 0; i < indices.size(); ++i)
      std::memcpy(to + i * row, from + static_cast<size_t>(indices[i]) * row, row);
    out[name] = batch;
  }
  return out;
}

NamedArrays slice_rows(const NamedArrays& arrays, int64_t begin, int64_t end) {
  NamedArrays out;
  for (const auto& [name, t] : arrays) out[name] = slice_axis(t, 0, begin, end - begin);
  return out;
}

}  // namespace autoshard::cli
