// The cache key of a backend's per-descriptor state (oneDNN primitives, cuDNN descriptors and algorithms):
// an op of the backend's own enum and up to kMaxFields numbers of its descriptor (floats by their bits,
// dtypes by their enum value). Built on the stack; hashing and comparing it allocate nothing (a formatted
// string per lookup did, ~30 times a training step).
//
// The CPU backend's OpKey / OpKeyHash (src/backend/cpu/cpu_backend.h) are this template over CpuOp; the CUDA
// backend's are OpKeyOf<CudaOp> (src/backend/cuda/cuda_backend.h).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <initializer_list>

#include "terngrad/core/error.h"

namespace tg {

template <typename Op>
struct OpKeyOf {
  static constexpr int kMaxFields = 16;
  Op op;
  int32_t size = 0;
  std::array<int64_t, kMaxFields> fields{};

  OpKeyOf(Op o, std::initializer_list<int64_t> values) : op(o), size(static_cast<int32_t>(values.size())) {
    TG_CHECK(values.size() <= fields.size(), "OpKey: {} fields, at most {}", values.size(), fields.size());
    std::copy(values.begin(), values.end(), fields.begin());
  }
  static int64_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
  }
  bool operator==(const OpKeyOf& o) const { return op == o.op && size == o.size && fields == o.fields; }
};

template <typename Op>
struct OpKeyHashOf {
  size_t operator()(const OpKeyOf<Op>& k) const {
    uint64_t h = 1469598103934665603ull ^ static_cast<uint64_t>(k.op);  // FNV-1a over the fields
    for (int i = 0; i < k.size; ++i) {
      h ^= static_cast<uint64_t>(k.fields[i]);
      h *= 1099511628211ull;
    }
    return static_cast<size_t>(h ^ (h >> 29));
  }
};

}  // namespace tg
