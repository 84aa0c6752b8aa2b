// MaxTree: a segment tree over time segments with range add and range max:
// the memory profile of an assignment, updated move by move.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace autoshard::solver {

class MaxTree {
 public:
  explicit MaxTree(int n = 1) : n_(n), max_(4 * n, 0), add_(4 * n, 0) {}
  void add(int lo, int hi, int64_t v) {
    if (lo < hi && v != 0) add(1, 0, n_, lo, hi, v);
  }
  int64_t max(int lo, int hi) const { return lo < hi ? max(1, 0, n_, lo, hi) : INT64_MIN; }
  int64_t max() const { return max_[1]; }
  int argmax() const {
    int node = 1, l = 0, r = n_;
    while (r - l > 1) {
      const int m = (l + r) / 2;
      if (max_[2 * node] >= max_[2 * node + 1])
        node = 2 * node, r = m;
      else
        node = 2 * node + 1, l = m;
    }
    return l;
  }

 private:
  void add(int node, int l, int r, int lo, int hi, int64_t v) {
    if (hi <= l || r <= lo) return;
    if (lo <= l && r <= hi) {
      max_[node] += v, add_[node] += v;
      return;
    }
    const int m = (l + r) / 2;
    add(2 * node, l, m, lo, hi, v);
    add(2 * node + 1, m, r, lo, hi, v);
    max_[node] = std::max(max_[2 * node], max_[2 * node + 1]) + add_[node];
  }
  int64_t max(int node, int l, int r, int lo, int hi) const {
    if (hi <= l || r <= lo) return INT64_MIN;
    if (lo <= l && r <= hi) return max_[node];
    const int m = (l + r) / 2;
    return std::max(max(2 * node, l, m, lo, hi), max(2 * node + 1, m, r, lo, hi)) + add_[node];
  }
  int n_;
  std::vector<int64_t> max_, add_;
};

}  // namespace autoshard::solver
