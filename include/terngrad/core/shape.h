// Shape: up to 8 dimensions of int64, NHWC for activations and (KH, KW, Cin, Cout) for convolution weights.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace tg {

class Shape {
 public:
  static constexpr int kMaxRank = 8;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims);

  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  int64_t dim(int i) const;  // negative i counts from the back; checked
  int64_t numel() const;
  std::vector<int64_t> dims() const { return {dims_.begin(), dims_.begin() + rank_}; }
  std::string str() const;  // "(64, 28, 28, 1)"

  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }

 private:
  void assign(const int64_t* dims, size_t n);
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

}  // namespace tg
