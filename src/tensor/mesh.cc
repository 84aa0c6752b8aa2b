#include "autoshard/tensor/mesh.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>

#include "autoshard/error.h"

namespace autoshard {

int tuple_axis(const std::vector<int>& members) {
  AS_CHECK(!members.empty(), "internal: a tuple of no mesh axes");
  if (members.size() == 1) return members[0];
  int id = kTupleAxisBit;
  for (size_t i = 0; i < members.size(); ++i) {
    const int a = members[i];
    AS_CHECK(a >= 0 && a < kMaxTupleAxes,
             "a dimension can be split over several mesh axes only "
             "among the first ",
             kMaxTupleAxes, " axes of a mesh (axis ", a, ")");
    AS_CHECK(i == 0 || a > members[i - 1], "internal: tuple members must be sorted and distinct");
    id |= 1 << a;
  }
  return id;
}

std::vector<int> axis_members(int id) {
  if (id < 0) return {};
  if (!is_tuple_axis(id)) return {id};
  std::vector<int> m;
  for (int a = 0; a < kMaxTupleAxes; ++a)
    if (id >> a & 1) m.push_back(a);
  return m;
}

uint64_t axis_bits(int id) {
  if (id < 0) return 0;
  if (!is_tuple_axis(id)) return id < 64 ? uint64_t{1} << id : 0;
  return uint64_t(id & (kTupleAxisBit - 1));
}

DeviceMesh::DeviceMesh(std::vector<int> shape, std::vector<std::string> names)
    : shape_(std::move(shape)), names_(std::move(names)) {
  AS_CHECK(!shape_.empty() && shape_.size() == names_.size(), "DeviceMesh: ", shape_.size(),
           " sizes for ", names_.size(), " axis names");
  std::set<std::string> seen;
  int64_t size = 1;  // checked as it grows, so it cannot wrap
  for (size_t i = 0; i < shape_.size(); ++i) {
    AS_CHECK(!names_[i].empty() && seen.insert(names_[i]).second, "DeviceMesh: axis names must be ",
             "unique and non-empty, got '", names_[i], "' twice or empty");
    AS_CHECK(shape_[i] >= 1, "DeviceMesh: axis '", names_[i], "' has size ", shape_[i],
             "; sizes must be >= 1");
    size *= shape_[i];
    AS_CHECK(size <= kMaxMeshDevices, "DeviceMesh ", to_string(), " has more than ",
             kMaxMeshDevices, " devices");
  }
  size_ = static_cast<int>(size);
}

namespace {
std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}
bool identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}
}  // namespace

DeviceMesh DeviceMesh::parse(const std::string& spec) {
  std::vector<int> shape;
  std::vector<std::string> names;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    std::string part =
        spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t eq = part.find('=');
    AS_CHECK(eq != std::string::npos, "mesh '", spec, "' must look like data=2,model=3");
    const std::string name = trimmed(part.substr(0, eq)), size = trimmed(part.substr(eq + 1));
    AS_CHECK(identifier(name), "mesh '", spec, "': axis name '", name,
             "' must be letters, digits and _ (like data=2,model=3)");
    names.push_back(name);
    int value = 0;
    const auto [end, ec] = std::from_chars(size.data(), size.data() + size.size(), value);
    AS_CHECK(ec == std::errc() && end == size.data() + size.size() && !size.empty(), "mesh '", spec,
             "': size of axis '", name, "' is not an integer (or too large)");
    shape.push_back(value);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return DeviceMesh(shape, names);
}

int DeviceMesh::axis_index(const std::string& name) const {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return static_cast<int>(i);
  return -1;
}

bool DeviceMesh::has_axis(int axis) const {
  if (axis < 0) return false;
  if (!is_tuple_axis(axis)) return axis < rank();
  for (int a : axis_members(axis))
    if (a >= rank()) return false;
  return true;
}

int DeviceMesh::axis_size(int axis) const {
  if (!is_tuple_axis(axis)) return shape_[axis];
  int size = 1;
  for (int a : axis_members(axis)) size *= shape_[a];
  return size;
}

std::string axis_name(const std::vector<std::string>& names, int axis) {
  const std::vector<int> members = axis_members(axis);
  for (int a : members)
    if (a >= int(names.size())) return "";
  if (members.size() == 1) return names[size_t(members[0])];
  std::string s = "(";
  for (int a : members) s += (s.size() > 1 ? "," : "") + names[size_t(a)];
  return members.empty() ? "" : s + ")";
}

std::string DeviceMesh::axis_name(int axis) const {
  return autoshard::axis_name(names_, axis);
}

int DeviceMesh::coordinate(int device, int axis) const {
  const std::vector<int> c = coordinates(device);
  int k = 0;
  for (int a : axis_members(axis)) k = k * shape_[a] + c[a];
  return k;
}

std::vector<int> DeviceMesh::coordinates(int device) const {
  std::vector<int> c(shape_.size());
  for (size_t i = shape_.size(); i-- > 0;) {
    c[i] = device % shape_[i];
    device /= shape_[i];
  }
  return c;
}

int DeviceMesh::device_at(const std::vector<int>& coords) const {
  int d = 0;
  for (size_t i = 0; i < shape_.size(); ++i) d = d * shape_[i] + coords[i];
  return d;
}

std::vector<int> DeviceMesh::group(int device, int axis) const {
  std::vector<int> c = coordinates(device), g;
  const std::vector<int> members = axis_members(axis);
  for (int k = 0, size = axis_size(axis); k < size; ++k) {
    for (int m = int(members.size()), rest = k; m-- > 0; rest /= shape_[members[m]])
      c[members[m]] = rest % shape_[members[m]];
    g.push_back(device_at(c));
  }
  return g;
}

std::vector<int> DeviceMesh::collective_tuples() const {
  std::vector<int> wide;  // the axes of more than one device
  for (int a = 0; a < rank(); ++a)
    if (shape_[a] > 1) wide.push_back(a);
  std::vector<int> out;
  if (wide.empty() || wide.back() >= kMaxTupleAxes) return out;
  for (size_t first = 0; first < wide.size(); ++first)
    for (size_t last = first + 1; last < wide.size(); ++last)
      out.push_back(
          tuple_axis(std::vector<int>(wide.begin() + long(first), wide.begin() + long(last) + 1)));
  return out;
}

bool DeviceMesh::collective_axis(int axis) const {
  if (!is_tuple_axis(axis)) return axis >= 0 && axis < rank();
  const std::vector<int> tuples = collective_tuples();
  return std::find(tuples.begin(), tuples.end(), axis) != tuples.end();
}

int64_t DeviceMesh::axis_stride(int axis) const {
  const std::vector<int> members = axis_members(axis);
  int64_t stride = 1;
  for (int a = rank() - 1; a > members.back(); --a) stride *= shape_[a];
  return stride;
}

std::string DeviceMesh::to_string() const {
  std::string s;
  for (size_t i = 0; i < shape_.size(); ++i)
    s += (i ? "," : "") + names_[i] + "=" + std::to_string(shape_[i]);
  return s;
}

}  // namespace autoshard
