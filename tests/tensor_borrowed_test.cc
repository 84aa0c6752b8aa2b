// Tensor::borrowed: a tensor over memory it does not own (the Python
// bindings lend NumPy arrays to fit), kept alive by its owner.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "autoshard/tensor/array_split.h"
#include "autoshard/tensor/tensor.h"

namespace autoshard {
namespace {

TEST(TensorBorrowed, ReadsTheMemoryInPlaceAndKeepsItsOwnerAlive) {
  auto owner = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4, 5, 6});
  std::weak_ptr<std::vector<float>> alive = owner;
  Tensor t = Tensor::borrowed({3, 2}, DType::F32, owner->data(), owner);
  float* data = owner->data();
  owner.reset();
  ASSERT_FALSE(alive.expired());  // the tensor holds it
  EXPECT_EQ(t.f32(), data);       // no copy
  EXPECT_EQ(t.numel(), 6);
  // Batches are sliced out by copying (what fit does with a lent array).
  Tensor rows = slice_axis(t, 0, 1, 2);
  EXPECT_NE(rows.f32(), data + 2);
  EXPECT_EQ(rows.to_vector(), (std::vector<float>{3, 4, 5, 6}));
  Tensor copy = t;  // copies share the owner
  t = Tensor();
  EXPECT_FALSE(alive.expired());
  copy = Tensor();
  EXPECT_TRUE(alive.expired());
}

}  // namespace
}  // namespace autoshard
