// DeviceMesh: devices arranged in a grid with named axes (data=2, model=4).
// Device d sits at the row-major coordinates of d in the mesh shape.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace autoshard {

// Axis ids. 0 .. rank() - 1 name the mesh's own axes. A tensor dimension
// may also be split over several axes at once (Keras's TensorLayout axes as
// a tuple, `("data", "model")`, GSPMD's multi-axis dimension): such a tuple,
// its members in mesh order, has an id of its own, tuple_axis(members). Its
// size is the product of its members' sizes; a dimension split over it is
// split over the first member, and each piece then over the next (nested
// array_split), so that adding or removing the innermost member is a local
// slice or a gather over that one axis. A device's coordinate on a tuple is
// its coordinates on the members read as one number, the first member most
// significant (for the mesh's own order: its row-major device order).
// Tuples take members among the first kMaxTupleAxes axes.
inline constexpr int kMaxTupleAxes = 30;
inline constexpr int kTupleAxisBit = 1 << kMaxTupleAxes;
// The id of the axes `members` (sorted, distinct, at least one) taken
// together: the axis itself for one member.
int tuple_axis(const std::vector<int>& members);
inline bool is_tuple_axis(int id) {
  return id >= 0 && (id & kTupleAxisBit) != 0;
}
// The mesh axes of an id: {id} for a mesh axis, the members of a tuple in
// mesh order, none for -1 (a whole dimension).
std::vector<int> axis_members(int id);
// The members as a bit set (bit a for mesh axis a); 0 for -1.
uint64_t axis_bits(int id);
// Whether two ids share a mesh axis (then no two dimensions may use both).
inline bool axes_overlap(int a, int b) {
  return (axis_bits(a) & axis_bits(b)) != 0;
}
// An axis id's name among the mesh's axis `names`: "model", or a tuple's
// "(data,model)"; "" when a member is not among them.
std::string axis_name(const std::vector<std::string>& names, int axis);

class DeviceMesh {
 public:
  DeviceMesh() : DeviceMesh({1}, {"model"}) {}
  // Sizes and names of the axes; names must be unique and non-empty.
  DeviceMesh(std::vector<int> shape, std::vector<std::string> axis_names);
  // "data=2,model=3".
  static DeviceMesh parse(const std::string& spec);

  int size() const { return size_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  const std::vector<int>& shape() const { return shape_; }
  const std::vector<std::string>& axis_names() const { return names_; }
  // The size of an axis id: a mesh axis's, or the product of a tuple's.
  int axis_size(int axis) const;
  // Whether `axis` names this mesh's axis or a tuple of its axes.
  bool has_axis(int axis) const;
  // Index of a named axis, or -1.
  int axis_index(const std::string& name) const;
  // "model", or a tuple's "(data,model)".
  std::string axis_name(int axis) const;
  std::vector<int> coordinates(int device) const;
  // `device`'s coordinate on an axis id (see tuple_axis).
  int coordinate(int device, int axis) const;
  int device_at(const std::vector<int>& coords) const;
  // The devices that differ from `device` only along `axis` (a tuple's
  // members), ordered by their coordinate on it: the axis's group.
  std::vector<int> group(int device, int axis) const;
  // The tuples whose groups communicate in one collective: every run of two
  // or more consecutive axes of more than one device (axes of one device
  // between them are skipped). Their groups are blocks of devices evenly
  // strided, like a single axis's: (data,model) of data=2,model=4 is the
  // whole mesh. Other tuples communicate member by member.
  std::vector<int> collective_tuples() const;
  // Whether collectives may run over `axis` in one step: a mesh axis, or
  // one of collective_tuples().
  bool collective_axis(int axis) const;
  // The devices between two neighbours of `axis`'s group (a mesh axis's, or
  // a collective tuple's innermost member's).
  int64_t axis_stride(int axis) const;
  std::string to_string() const;  // "data=2,model=3"

 private:
  std::vector<int> shape_;
  std::vector<std::string> names_;
  int size_ = 1;
};

// The largest mesh that can be described (and planned or predicted for).
constexpr int kMaxMeshDevices = 1 << 24;
// Devices one process can run: in-process CPU devices, as many as asked for
// (independent of the number of cores), up to this limit.
constexpr int kMaxInProcessDevices = 256;

}  // namespace autoshard
