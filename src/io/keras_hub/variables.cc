// A KerasHub variable's view of its autoshard weight (keras_hub.h): the
// weight's shape and the Keras dims each of its dims lies in. The tables
// themselves are the families' (src/models/<family>/keras_hub.cc).
#include <numeric>
#include <tuple>

#include "autoshard/error.h"
#include "autoshard/io/keras_hub.h"

namespace autoshard::keras_hub {

Shape Variable::weight_shape() const {
  Shape s;
  for (int p : perm) s.push_back(split[p]);
  if (!s.empty()) s[0] += row_offset;
  return s;
}

namespace {

// For each dim of `split`, the Keras dim it is part of, and whether it is
// that Keras dim's first (outermost) factor.
void split_owners(const Variable& v, std::vector<int>& owner, std::vector<bool>& major) {
  owner.assign(v.split.size(), 0);
  major.assign(v.split.size(), false);
  // A Keras dim is the product of one or more consecutive split dims.
  size_t s = 0;
  for (size_t k = 0; k < v.keras_shape.size(); ++k) {
    int64_t covered = 1;
    for (bool first = true; first || covered < v.keras_shape[k]; first = false, ++s) {
      AS_CHECK(s < v.split.size(), "KerasHub variable '", v.path, "': split does not cover it");
      owner[s] = static_cast<int>(k);
      major[s] = covered == 1;  // only size-1 dims before it
      covered *= v.split[s];
    }
  }
  // Trailing size-1 dims belong to the last Keras dim.
  for (; s < v.split.size(); ++s) owner[s] = static_cast<int>(v.keras_shape.size()) - 1;
}

}  // namespace

std::vector<int> Variable::keras_dims() const {
  std::vector<int> owner;
  std::vector<bool> major;
  split_owners(*this, owner, major);
  std::vector<int> dims;
  for (int p : perm) dims.push_back(owner[p]);
  return dims;
}

bool Variable::major_in_keras_dim(int i) const {
  std::vector<int> owner;
  std::vector<bool> major;
  split_owners(*this, owner, major);
  return major[perm[i]];
}

}  // namespace autoshard::keras_hub
