// One row of the backend ops table (tests/backend_ops_table_test.cc, in the style of ggml's test-backend-ops): an op,
// its inputs (random f32 tensors of given shapes and ranges), its one output, how to run it on a backend and a plain
// reference written from the op's contract in backend.h, with the tolerances its CPU and CUDA results are held to.
// The element-wise, precision, coding, reduction and linear-algebra rows are in the test's file; the layer ops with
// descriptors (convolution, inner product, pooling, LRN, batch norm), channel concatenation and split, the loss and
// the optimizers in layer_op_rows.cc, an op with several outputs as one row per output.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "terngrad/backend/backend.h"
#include "terngrad/backend/op_desc.h"

namespace tg::testing {

using Inputs = std::vector<std::vector<float>>;
using OpRun = std::function<void(Backend&, const std::vector<Tensor>&, const Tensor&)>;
using OpReference = std::function<std::vector<double>(const Inputs&)>;

struct OpCase {
  std::string name;
  std::vector<Shape> inputs;
  Shape output;
  int output_from = -1;  // in place: the output starts as this input's values (else NaN)
  OpRun run;
  OpReference reference;
  double tolerance = 0;  // 0: the same bits as the reference's float result (and CUDA as the CPU)
  // Input 0 gets NaN and +-Inf at fixed places among its random values (an op must propagate them as the CPU does).
  bool special_values = false;
  bool repeatable = false;       // CUDA runs it twice: the same bits both times (a reduction's order is fixed)
  float low = -1.f, high = 1.f;  // the inputs' random values' range ...
  std::vector<std::pair<float, float>> ranges = {};  // ... or each input's own (when given)
  // CUDA gives the CPU's bits although the reference is held to a tolerance (batch norm: the same arithmetic in the
  // same order on both).
  bool cuda_same_bits = false;
};

// The layer ops' rows (layer_op_rows.cc): the shapes of the CUDA backend's former per-op tests, each checked on the
// CPU against tests/common/reference_ops.h and on CUDA against the CPU.
std::vector<OpCase> layer_op_cases();
// The convolutions of those rows (symmetric and asymmetric SAME padding, a 7x7 stem, groups, 1x1), for the CUDA
// backend's own checks of the same descriptors (its caches and algorithms).
std::vector<ConvDesc> table_conv_descs();

}  // namespace tg::testing
