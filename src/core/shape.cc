// Shape construction, checked indexing and printing.
#include "terngrad/core/shape.h"

#include <fmt/format.h>

#include "terngrad/core/error.h"

namespace tg {

// Both constructors copy straight into the fixed array: building a Shape never allocates.
Shape::Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.size()); }

Shape::Shape(const std::vector<int64_t>& dims) { assign(dims.data(), dims.size()); }

void Shape::assign(const int64_t* dims, size_t n) {
  TG_CHECK(n <= static_cast<size_t>(kMaxRank), "shape of rank {} exceeds the maximum rank {}", n, kMaxRank);
  rank_ = static_cast<int>(n);
  for (int i = 0; i < rank_; ++i) {
    TG_CHECK(dims[i] >= 0, "negative dimension {} in a shape", dims[i]);
    dims_[i] = dims[i];
  }
}

int64_t Shape::dim(int i) const {
  int j = i < 0 ? rank_ + i : i;
  TG_CHECK(j >= 0 && j < rank_, "dimension {} out of range for shape {}", i, str());
  return dims_[j];
}

// Overflow-checked: a shape from a file (a crafted checkpoint header) must not wrap into a small or negative
// count that an allocation or a loop would then trust.
int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i)
    if (__builtin_mul_overflow(n, dims_[i], &n)) TG_THROW("shape {} has more than 2^63 - 1 elements", str());
  return n;
}

std::string Shape::str() const {
  std::string s = "(";
  for (int i = 0; i < rank_; ++i) s += fmt::format(i ? ", {}" : "{}", dims_[i]);
  return s + (rank_ == 1 ? ",)" : ")");
}

bool Shape::operator==(const Shape& o) const {
  if (rank_ != o.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[i] != o.dims_[i]) return false;
  return true;
}

}  // namespace tg
