// DeviceMesh: devices arranged in a grid with named axes (data=2, model=4).
// Device d sits at the row-major coordinates of d in the mesh shape.
#pragma once

#include <string>
#include <vector>

namespace autoshard {

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
  int axis_size(int axis) const { return shape_[axis]; }
  // Index of a named axis, or -1.
  int axis_index(const std::string& name) const;
  std::vector<int> coordinates(int device) const;
  int device_at(const std::vector<int>& coords) const;
  // The devices that differ from `device` only along `axis`, ordered by their
  // coordinate on that axis: the communication group of that axis.
  std::vector<int> group(int device, int axis) const;
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
