// LayerHarness (one layer, all its tensors allocated on the host) and the central-difference gradient
// checker; see grad_check.h for the method.
#include "common/grad_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "terngrad/backend/backend.h"
#include "terngrad/core/error.h"

namespace tg {

void fill_uniform(const Tensor& t, uint32_t seed, float lo, float hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(gen);
}

std::string GradCheckReport::summary() const {
  std::string s = fmt::format("checked {}, kinks {}, failures {}", checked, kinks, failures.size());
  for (size_t i = 0; i < failures.size() && i < 10; ++i) s += "\n  " + failures[i];
  if (failures.size() > 10) s += fmt::format("\n  ... and {} more", failures.size() - 10);
  return s;
}

// ---- LayerHarness -----------------------------------------------------------------------------------

LayerHarness::LayerHarness(LayerPtr layer, std::vector<Shape> input_shapes, std::vector<DType> input_dtypes,
                           Backend* backend)
    : layer_(std::move(layer)) {
  TG_CHECK(layer_ != nullptr, "LayerHarness: no layer");
  if (backend == nullptr) {
    BackendOptions options;
    options.threads = 1;  // deterministic and cheap on a shared CI machine
    owned_backend_ = make_backend("cpu", options);
    backend = owned_backend_.get();
  }
  TG_CHECK(backend->device().is_cpu(), "LayerHarness runs layers on the cpu, got {}", backend->name());
  backend_ = backend;
  if (input_dtypes.empty()) input_dtypes.assign(input_shapes.size(), DType::kF32);
  TG_CHECK(input_dtypes.size() == input_shapes.size(), "LayerHarness: {} input shapes but {} dtypes",
           input_shapes.size(), input_dtypes.size());

  ctx_ = std::make_unique<SetupContext>(*backend_, layer_->name(), input_shapes);
  std::vector<Shape> outs = layer_->setup(*ctx_);

  io_.backend = backend_;
  io_.key = philox_key(1234, 0);
  io_.step = 7;
  io_.layer_id = 3;
  for (size_t i = 0; i < input_shapes.size(); ++i) {
    io_.in.push_back(allocate(input_shapes[i], input_dtypes[i]));
    bool differentiable = layer_->input_differentiable(static_cast<int>(i)) && input_dtypes[i] == DType::kF32;
    io_.din.push_back(differentiable ? allocate(input_shapes[i], DType::kF32) : Tensor());
  }
  for (const Shape& s : outs) {
    io_.out.push_back(allocate(s, DType::kF32));
    io_.dout.push_back(allocate(s, DType::kF32));
  }
  for (const ParamSpec& p : ctx_->params()) {
    io_.params.push_back(allocate(p.shape, DType::kF32));
    io_.dparams.push_back(allocate(p.shape, DType::kF32));
    initialize_host(p.init, io_.params.back(), 1, static_cast<uint32_t>(io_.params.size()));
  }
  for (const StateSpec& s : ctx_->states()) {
    io_.state.push_back(allocate(s.shape, DType::kF32));
    backend_->fill(io_.state.back(), s.init_value);
  }
  for (const SavedSpec& s : ctx_->saveds()) io_.saved.push_back(allocate(s.shape, s.dtype));
}

LayerHarness::~LayerHarness() = default;

const std::vector<ParamSpec>& LayerHarness::param_specs() const { return ctx_->params(); }
const std::vector<StateSpec>& LayerHarness::state_specs() const { return ctx_->states(); }
const std::vector<SavedSpec>& LayerHarness::saved_specs() const { return ctx_->saveds(); }

Tensor LayerHarness::allocate(const Shape& shape, DType dtype) {
  size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  buffers_.emplace_back(host_allocator(), std::max<size_t>(bytes, 1));
  std::fill_n(static_cast<uint8_t*>(buffers_.back().data()), bytes, uint8_t{0});
  return Tensor(buffers_.back().data(), shape, dtype, Device::cpu());
}

void LayerHarness::randomize(const GradCheckOptions& o) {
  uint32_t seed = o.seed;
  for (const Tensor& t : io_.in)
    if (t.dtype() == DType::kF32) fill_uniform(t, ++seed, o.input_lo, o.input_hi);
  for (const Tensor& t : io_.params) fill_uniform(t, ++seed, o.param_lo, o.param_hi);
  for (size_t i = 0; i < io_.state.size(); ++i) backend_->fill(io_.state[i], ctx_->states()[i].init_value);
}

void LayerHarness::forward(bool training) {
  io_.training = training;
  layer_->forward(io_);
}

void LayerHarness::backward() { layer_->backward(io_); }

// ---- gradient check ---------------------------------------------------------------------------------

namespace {

struct Checker {
  LayerHarness& h;
  const GradCheckOptions& o;
  std::vector<std::vector<double>> r;  // per output, the loss weights
  GradCheckReport report;

  double loss() {
    h.forward(o.training);
    double l = 0;
    for (size_t k = 0; k < h.io().out.size(); ++k) {
      const float* y = h.io().out[k].data<float>();
      for (size_t i = 0; i < r[k].size(); ++i) l += static_cast<double>(y[i]) * r[k][i];
    }
    return l;
  }

  bool close(double a, double b) const {
    return std::fabs(a - b) <= o.threshold * std::max({std::fabs(a), std::fabs(b), 1.0});
  }

  // Loss with element p moved by `delta` (in float); returns the loss and sets `actual` to the step taken.
  double loss_at(float* p, float orig, double delta, double* actual) {
    *p = static_cast<float>(orig + delta);
    *actual = static_cast<double>(*p) - static_cast<double>(orig);
    double l = loss();
    *p = orig;
    return l;
  }

  void check_tensor(const std::string& name, const Tensor& value, const std::vector<double>& analytic, double f0) {
    float* v = value.data<float>();
    int64_t n = value.numel();
    int64_t stride = 1;
    if (o.max_elements_per_tensor > 0 && n > o.max_elements_per_tensor)
      stride = (n + o.max_elements_per_tensor - 1) / o.max_elements_per_tensor;
    for (int64_t i = 0; i < n; i += stride) {
      ++report.checked;
      float orig = v[i];
      double hp, hm;
      double fp = loss_at(&v[i], orig, o.step, &hp);
      double fm = loss_at(&v[i], orig, -o.step, &hm);
      double numeric = (fp - fm) / (hp - hm);
      double a = analytic[i];
      if (close(a, numeric)) continue;
      // Near a kink? Re-measure closer in.
      double sp, sm;
      double fps = loss_at(&v[i], orig, o.step / 10, &sp);
      double fms = loss_at(&v[i], orig, -o.step / 10, &sm);
      double central = (fps - fms) / (sp - sm);
      if (close(a, central)) continue;
      double right = (fps - f0) / sp, left = (f0 - fms) / (-sm);
      if (std::fabs(right - left) > o.threshold * std::max({std::fabs(right), std::fabs(left), 1.0})) {
        ++report.kinks;
        continue;
      }
      report.failures.push_back(
          fmt::format("{}[{}] (value {}): analytic {:.7g}, numeric {:.7g} (step {}), {:.7g} "
                      "(step {})",
                      name, i, orig, a, numeric, o.step, central, o.step / 10));
    }
  }
};

std::vector<double> to_double(const Tensor& t) {
  const float* p = t.data<float>();
  return std::vector<double>(p, p + t.numel());
}

}  // namespace

GradCheckReport check_gradients(LayerHarness& h, const GradCheckOptions& o) {
  Checker c{h, o, {}, {}};
  LayerIO& io = h.io();
  std::mt19937 gen(o.seed + 99);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  h.forward(o.training);
  for (const Tensor& dy : io.dout) {
    float* p = dy.data<float>();
    c.r.emplace_back(dy.numel());
    for (int64_t i = 0; i < dy.numel(); ++i) c.r.back()[i] = p[i] = u(gen);
  }
  for (const Tensor& d : io.din)
    if (d) h.backend().fill(d, std::nanf(""));  // must be written by the backward
  for (const Tensor& d : io.dparams) h.backend().fill(d, std::nanf(""));
  h.backward();
  std::vector<std::vector<double>> din, dparams;
  for (const Tensor& d : io.din) din.push_back(d ? to_double(d) : std::vector<double>());
  for (const Tensor& d : io.dparams) dparams.push_back(to_double(d));

  const double f0 = c.loss();
  const std::string& layer = h.layer().name();
  if (o.check_inputs)
    for (size_t k = 0; k < io.in.size(); ++k)
      if (io.din[k]) c.check_tensor(fmt::format("{}/input{}", layer, k), io.in[k], din[k], f0);
  if (o.check_params)
    for (size_t k = 0; k < io.params.size(); ++k) c.check_tensor(h.param_specs()[k].name, io.params[k], dparams[k], f0);

  if (c.report.checked > 0 &&
      static_cast<double>(c.report.kinks) > o.max_kink_fraction * static_cast<double>(c.report.checked))
    c.report.failures.push_back(
        fmt::format("{}: {} of {} elements sit on kinks (limit {:.0f}%): the check says "
                    "nothing; use other inputs",
                    layer, c.report.kinks, c.report.checked, 100 * o.max_kink_fraction));
  h.forward(o.training);  // leave the outputs at the unperturbed point
  return c.report;
}

GradCheckReport check_layer_gradients(LayerPtr layer, const std::vector<Shape>& input_shapes,
                                      const GradCheckOptions& o) {
  LayerHarness h(std::move(layer), input_shapes);
  h.randomize(o);
  return check_gradients(h, o);
}

}  // namespace tg
