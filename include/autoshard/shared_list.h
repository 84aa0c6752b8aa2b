// An immutable list that its copies share, read as a const std::vector<T>:
// for lists copied far more often than they are made (a partitioned
// program's collectives' block sizes, a loop nest's strategies). Below every
// layer, like error.h.
#pragma once

#include <memory>
#include <utility>
#include <vector>

namespace autoshard {

template <typename T>
class SharedList {
 public:
  SharedList() = default;
  SharedList(std::vector<T> items)  // NOLINT: implicit, a list reads as one
      : items_(std::make_shared<const std::vector<T>>(std::move(items))) {}
  explicit SharedList(std::shared_ptr<const std::vector<T>> items) : items_(std::move(items)) {}
  const std::vector<T>& values() const { return items_ ? *items_ : none(); }
  operator const std::vector<T>&() const { return values(); }  // NOLINT
  size_t size() const { return values().size(); }
  bool empty() const { return values().empty(); }
  const T& operator[](size_t i) const { return values()[i]; }
  const T& at(size_t i) const { return values().at(i); }
  typename std::vector<T>::const_iterator begin() const { return values().begin(); }
  typename std::vector<T>::const_iterator end() const { return values().end(); }

 private:
  static const std::vector<T>& none() {
    static const std::vector<T> empty;
    return empty;
  }
  std::shared_ptr<const std::vector<T>> items_;
};

}  // namespace autoshard
