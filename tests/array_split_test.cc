#include "autoshard/tensor/array_split.h"

#include <gtest/gtest.h>

#include "autoshard/error.h"

namespace autoshard {
namespace {

std::vector<int64_t> sizes_along(const std::vector<Tensor>& parts, int axis) {
  std::vector<int64_t> s;
  for (const Tensor& p : parts) s.push_back(p.dim(axis));
  return s;
}

Tensor iota(Shape shape) {
  Tensor t(std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = static_cast<float>(i);
  return t;
}

TEST(ArraySplit, NumpySizes) {
  EXPECT_EQ(sizes_along(ops::array_split(iota({10}), 3), 0), (std::vector<int64_t>{4, 3, 3}));
  EXPECT_EQ(sizes_along(ops::array_split(iota({7}), 3), 0), (std::vector<int64_t>{3, 2, 2}));
  EXPECT_EQ(sizes_along(ops::array_split(iota({0}), 2), 0), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(sizes_along(ops::array_split(iota({1}), 2), 0), (std::vector<int64_t>{1, 0}));
}

TEST(ArraySplit, LastAxisShapes) {
  auto parts = ops::array_split(iota({2, 3, 7}), 3, -1);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].shape(), (Shape{2, 3, 3}));
  EXPECT_EQ(parts[1].shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(parts[2].shape(), (Shape{2, 3, 2}));
  // Element (1, 2, 5) lives in part 2 at column 5 - 5 = 0... offsets are 0, 3, 5.
  EXPECT_EQ(parts[2].f32()[(1 * 3 + 2) * 2 + 0], static_cast<float>((1 * 3 + 2) * 7 + 5));
  EXPECT_EQ(parts[1].f32()[(0 * 3 + 1) * 2 + 1], static_cast<float>((0 * 3 + 1) * 7 + 4));
}

TEST(ArraySplit, ConcatenateInverts) {
  Tensor x = iota({5, 4, 3});
  for (int axis = 0; axis < 3; ++axis)
    for (int k = 1; k <= 6; ++k) {
      Tensor back = concatenate(ops::array_split(x, k, axis), axis);
      EXPECT_EQ(max_abs_diff(back, x), 0.0) << "axis " << axis << " k " << k;
    }
}

TEST(ArraySplit, OffsetsAgreeWithSizes) {
  for (int64_t n = 0; n < 40; ++n)
    for (int64_t k = 1; k < 9; ++k) {
      int64_t off = 0;
      for (int64_t i = 0; i < k; ++i) {
        EXPECT_EQ(split_offset(n, k, i), off);
        off += split_size(n, k, i);
      }
      EXPECT_EQ(off, n);
    }
}

TEST(ArraySplit, NonPositiveSectionsIsAnError) {
  EXPECT_THROW(ops::array_split(iota({4}), 0), Error);
  EXPECT_THROW(ops::array_split(iota({4}), -2), Error);
  EXPECT_THROW(ops::array_split(iota({4}), 2, 3), Error);
}

}  // namespace
}  // namespace autoshard

namespace autoshard {
namespace {

// Nested splits (a dimension over a tuple of mesh axes): each part split
// again, in order; the sizes add up to n, and equal the flat split when
// every level divides.
TEST(ArraySplit, NestedSplitsSplitEachPartAgain) {
  EXPECT_EQ(nested_split_sizes(10, {2, 2}), (std::vector<int64_t>{3, 2, 3, 2}));
  EXPECT_EQ(nested_split_sizes(11, {2, 3}), (std::vector<int64_t>{2, 2, 2, 2, 2, 1}));
  EXPECT_EQ(nested_split_sizes(1, {2, 2}), (std::vector<int64_t>{1, 0, 0, 0}));
  EXPECT_EQ(nested_split_sizes(24, {2, 3, 2}), split_sizes(24, 12));
  EXPECT_EQ(nested_split_sizes(5, {}), (std::vector<int64_t>{5}));
}

}  // namespace
}  // namespace autoshard
