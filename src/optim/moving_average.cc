// ExponentialMovingAverage: shadow slab layout (one group per tracked slab, or one entry per tensor), the
// TF decay formula, update, swap and assignment.
#include "terngrad/optim/moving_average.h"

#include <algorithm>
#include <cmath>

#include "terngrad/core/error.h"

namespace tg {

namespace {

constexpr size_t kSlabAlign = 64;  // Slab's entry alignment (slab.cc)
size_t align_up(size_t n) { return (n + kSlabAlign - 1) / kSlabAlign * kSlabAlign; }

void check_decay(float decay) {
  TG_CHECK(std::isfinite(decay) && decay >= 0.f && decay <= 1.f, "moving-average decay must be in [0, 1], got {}",
           decay);
}

Tensor flat_f32(void* data, size_t bytes, Device device) {
  return Tensor(data, Shape{static_cast<int64_t>(bytes / sizeof(float))}, DType::kF32, device);
}

}  // namespace

ExponentialMovingAverage::ExponentialMovingAverage(Backend& backend, const std::vector<const Slab*>& sources,
                                                   float decay)
    : decay_(decay) {
  check_decay(decay);
  struct Group {
    const Slab* source;
    int first_shadow;  // index of its first shadow entry
  };
  std::vector<Group> groups;
  for (const Slab* src : sources) {
    TG_CHECK(src != nullptr, "moving average: null slab");
    TG_CHECK(src->allocated(), "moving average: tracked slab is not allocated");
    if (src->size() == 0) continue;
    TG_CHECK(src->device() == backend.device(), "moving average: tracked slab is on {}, the backend on {}",
             src->device().str(), backend.device().str());
    groups.push_back({src, shadow_.size()});
    for (const Slab::Entry& e : src->entries()) {
      TG_CHECK(e.dtype == DType::kF32, "moving average: tensor '{}' is {}, only f32 tensors are averaged", e.name,
               dtype_name(e.dtype));
      shadow_.add(shadow_name(e.name), e.shape, DType::kF32);
    }
  }
  shadow_.allocate(backend.allocator());
  for (const Group& g : groups) {
    // The group must mirror its source byte for byte, so one flat update covers it.
    const size_t start = shadow_.entry(g.first_shadow).offset;
    size_t end = 0;
    for (int i = 0; i < g.source->size(); ++i) {
      const Slab::Entry& e = g.source->entry(i);
      TG_CHECK(shadow_.entry(g.first_shadow + i).offset - start == e.offset,
               "moving average: shadow of '{}' is not laid out like its source", e.name);
      end = e.offset + static_cast<size_t>(e.shape.numel()) * sizeof(float);
    }
    TG_CHECK(align_up(end) == g.source->bytes() && start + g.source->bytes() <= shadow_.bytes(),
             "moving average: tracked slab of {} bytes does not match its shadow layout", g.source->bytes());
    pairs_.push_back({flat_f32(g.source->data(), g.source->bytes(), g.source->device()),
                      flat_f32(static_cast<char*>(shadow_.data()) + start, g.source->bytes(), shadow_.device())});
  }
  initialise(backend);
}

ExponentialMovingAverage::ExponentialMovingAverage(Backend& backend,
                                                   const std::vector<std::pair<std::string, Tensor>>& tracked,
                                                   float decay)
    : decay_(decay) {
  check_decay(decay);
  for (const auto& [name, t] : tracked) {
    TG_CHECK(t.defined() && t.dtype() == DType::kF32,
             "moving average: tensor '{}' must be a defined f32 tensor, "
             "got {}",
             name, t.str());
    TG_CHECK(t.device() == backend.device(), "moving average: tensor '{}' is on {}, the backend on {}", name,
             t.device().str(), backend.device().str());
    shadow_.add(shadow_name(name), t.shape(), DType::kF32);
  }
  shadow_.allocate(backend.allocator());
  for (size_t i = 0; i < tracked.size(); ++i) pairs_.push_back({tracked[i].second, shadow_.view(int(i))});
  initialise(backend);
}

void ExponentialMovingAverage::initialise(Backend& backend) {
  for (const Pair& p : pairs_)
    if (p.live.numel() > 0) backend.copy(p.shadow, p.live);
}

double ExponentialMovingAverage::decay_at(double decay, int64_t step) {
  TG_CHECK(step >= 0, "moving average: step must be >= 0, got {}", step);
  const double t = static_cast<double>(step);
  return std::min(decay, (1.0 + t) / (10.0 + t));
}

void ExponentialMovingAverage::update(Backend& backend, int64_t step, const Slab* except) {
  const float d = static_cast<float>(decay_at(step));
  for (const Pair& p : pairs_)
    if (p.live.numel() > 0 && !(except && p.live.raw() == except->data())) backend.ema_update(d, p.live, p.shadow);
}

Tensor ExponentialMovingAverage::flat_average(const Slab& tracked) const {
  for (const Pair& p : pairs_)
    if (p.live.raw() == tracked.data() && p.live.bytes() == tracked.bytes()) return p.shadow;
  return Tensor();
}

void ExponentialMovingAverage::swap(Backend& backend) {
  size_t largest = 0;
  for (const Pair& p : pairs_) largest = std::max(largest, p.live.bytes());
  if (largest == 0) return;
  if (scratch_.bytes() < largest) scratch_ = Buffer(backend.allocator(), largest);
  for (const Pair& p : pairs_) {
    if (p.live.numel() == 0) continue;
    Tensor tmp(scratch_.data(), p.live.shape(), DType::kF32, backend.device());
    backend.copy(tmp, p.live);
    backend.copy(p.live, p.shadow);
    backend.copy(p.shadow, tmp);
  }
}

void ExponentialMovingAverage::assign_averages(Backend& backend) {
  for (const Pair& p : pairs_)
    if (p.live.numel() > 0) backend.copy(p.live, p.shadow);
}

}  // namespace tg
