// Running one Layer on its own, and checking its backward numerically (in the style of Caffe's
// test_gradient_check_util.hpp).
//
// LayerHarness sets a layer up for given input shapes on a CPU backend and allocates every tensor the Net
// would (inputs, outputs, their gradients, parameters, parameter gradients, state, saved tensors), so a test
// can run forward/backward and look at everything. check_gradients() then compares the backward with central
// differences of the scalar loss L = sum_i y_i * r_i (r fixed, uniform in [-1, 1]; accumulated in double):
// each input/parameter element is perturbed by +-step, the forward rerun, and
//   |analytic - numeric| <= threshold * max(|analytic|, |numeric|, 1)
// must hold. Every forward runs with the same step/key/layer id, i.e. a fixed seed, so dropout's mask is the
// same in every evaluation.
//
// Kinks (ReLU at 0, max-pool near-ties, ...) are found, not declared: when the central difference disagrees,
// the element is re-measured with step/10; if that central difference agrees the element passes, if the two
// one-sided differences at step/10 disagree by more than the tolerance the function is not differentiable
// there and the element is skipped as a kink; otherwise it fails. A check where more than
// max_kink_fraction of the elements are kinks fails too, so a check can never pass by skipping everything.
//
// One call checks any layer:   EXPECT_GRADIENTS_OK(check_layer_gradients(relu("r"), {Shape{2, 3, 4, 5}}));
// Layers with non-f32 inputs (labels): build a LayerHarness with the input dtypes, randomize(), fill the
// labels, then check_gradients(harness, options).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "terngrad/core/buffer.h"
#include "terngrad/nn/layer.h"

namespace tg {

struct GradCheckOptions {
  double step = 1e-2;
  double threshold = 1e-3;
  bool training = true;                   // forward mode (BN batch statistics, dropout)
  float input_lo = -1.f, input_hi = 1.f;  // randomize(): f32 inputs uniform in [lo, hi)
  float param_lo = -1.f, param_hi = 1.f;  // randomize(): parameters uniform in [lo, hi)
  uint32_t seed = 1701;                   // inputs, parameters and r
  double max_kink_fraction = 0.1;
  int64_t max_elements_per_tensor = 0;  // 0: every element; else an evenly strided subset
  bool check_inputs = true, check_params = true;
};

struct GradCheckReport {
  int64_t checked = 0;  // elements compared (kinks included)
  int64_t kinks = 0;    // elements skipped as non-differentiable points
  std::vector<std::string> failures;
  bool ok() const { return failures.empty(); }
  std::string summary() const;  // "checked 412, kinks 3, failures 0" + the first failures
};

class LayerHarness {
 public:
  // input_dtypes: per input (default all f32). backend: a CPU backend to use; nullptr = a private one.
  LayerHarness(LayerPtr layer, std::vector<Shape> input_shapes, std::vector<DType> input_dtypes = {},
               Backend* backend = nullptr);
  ~LayerHarness();
  LayerHarness(const LayerHarness&) = delete;
  LayerHarness& operator=(const LayerHarness&) = delete;

  Layer& layer() { return *layer_; }
  Backend& backend() { return *backend_; }
  LayerIO& io() { return io_; }  // in, out, din, dout, params, dparams, state, saved
  const std::vector<ParamSpec>& param_specs() const;
  const std::vector<StateSpec>& state_specs() const;
  const std::vector<SavedSpec>& saved_specs() const;

  // Fills f32 inputs and all parameters with uniform random values (non-f32 inputs are left to the caller);
  // state gets its declared initial values.
  void randomize(const GradCheckOptions& o);
  void forward(bool training);
  void backward();

 private:
  Tensor allocate(const Shape& shape, DType dtype);
  std::unique_ptr<Backend> owned_backend_;
  Backend* backend_ = nullptr;
  LayerPtr layer_;
  std::unique_ptr<SetupContext> ctx_;
  std::vector<Buffer> buffers_;
  LayerIO io_;
};

// Checks the current inputs/parameters of `h` (call h.randomize() first, or set them).
GradCheckReport check_gradients(LayerHarness& h, const GradCheckOptions& o = {});
// Builds a harness for `layer` with f32 inputs of these shapes, randomizes it and checks it.
GradCheckReport check_layer_gradients(LayerPtr layer, const std::vector<Shape>& input_shapes,
                                      const GradCheckOptions& o = {});

// Fills a host f32 tensor with uniform values in [lo, hi) from a seeded generator.
void fill_uniform(const Tensor& t, uint32_t seed, float lo, float hi);

}  // namespace tg

// gtest helper: EXPECT_GRADIENTS_OK(report) prints the summary on failure.
#define EXPECT_GRADIENTS_OK(report_expr)               \
  do {                                                 \
    const ::tg::GradCheckReport r_ = (report_expr);    \
    EXPECT_TRUE(r_.ok()) << r_.summary();              \
    EXPECT_GT(r_.checked, 0) << "nothing was checked"; \
  } while (0)
