// A training run's memory per device, planned (memory_budget.h): the areas, what is available, the largest batch
// that fits, and the size parser of --fit_memory.
#include "terngrad/train/memory_budget.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <limits>

#include "terngrad/compress/compression_policy.h"
#include "terngrad/core/human_units.h"
#include "terngrad/exchange/scheme_registry.h"
#include "terngrad/models/registry.h"
#include "terngrad/optim/optimizer.h"

namespace tg {

namespace {

// A slab's allocated size for these tensors (Slab: 64-byte aligned entries, the total rounded up to 64).
size_t slab_bytes(const std::vector<std::pair<Shape, DType>>& tensors) {
  size_t end = 0;
  for (const auto& [shape, dtype] : tensors)
    end = align_up(end) + static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  return align_up(end);
}

// The exchange's buffers (its scheme's arenas and state, SchemeInfo::buffer_bytes), from the policy: exact up to each
// bucket's alignment for the dense schemes and terngrad (error feedback included), an estimate for the others.
size_t exchange_bytes(const TrainConfig& cfg, const std::vector<ParamSpec>& params, const TrainingLayout& l) {
  std::vector<ParamInfo> infos;
  for (const ParamSpec& p : params) infos.push_back({p.name, p.shape.numel()});
  const CompressionPolicy policy(cfg, infos);
  SchemeMemoryQuery q;
  q.policy = &policy;
  q.options = ExchangeOptions(cfg, cfg.seed);
  q.layout = {l.world_workers(), l.num_nodes, l.ranks_per_node};
  q.local_workers = l.workers_per_replica;
  q.group = l.processes * l.replicas > 1;  // a world group to exchange with (else: averaged in place)
  return gradient_scheme(scheme_name_for(cfg.grad_bits, q.options.exchange, q.layout)).buffer_bytes(q);
}

void add(DeviceMemoryPlan& p, const char* name, size_t bytes) { p.areas.push_back({name, bytes}); }

}  // namespace

TrainingLayout TrainingLayout::of(const TrainConfig& cfg, int processes) {
  TrainingLayout l;
  l.processes = processes;
  l.replicas = cfg.device == "cpu" ? cfg.cpu_replicas : cfg.num_gpus;
  l.workers_per_replica = cfg.workers_per_process() / l.replicas;
  l.worker_batch = cfg.total_batch() / (static_cast<int64_t>(cfg.workers_per_process()) * processes);
  l.ranks_per_node = cfg.ranks_per_node > 0 ? cfg.ranks_per_node : processes * l.replicas;
  l.num_nodes = std::max(1, processes * l.replicas / l.ranks_per_node);
  return l;
}

size_t DeviceMemoryPlan::total() const {
  size_t t = 0;
  for (const MemoryArea& a : areas) t += a.bytes;
  return t;
}

size_t DeviceMemoryPlan::area(const std::string& name) const {
  for (const MemoryArea& a : areas)
    if (a.name == name) return a.bytes;
  return 0;
}

std::string DeviceMemoryPlan::describe() const {
  std::string s;
  for (const MemoryArea& a : areas)
    if (a.bytes > 0) s += fmt::format("{} {}, ", a.name, human_bytes(static_cast<double>(a.bytes)));
  return s + "total " + human_bytes(static_cast<double>(total()));
}

std::string DeviceMemoryPlan::table() const {
  std::string s;
  for (const MemoryArea& a : areas)
    s += fmt::format("  {:<22} {:>12}  {:>15} bytes\n", a.name, human_bytes(double(a.bytes)), a.bytes);
  s += fmt::format("  {:<22} {:>12}  {:>15} bytes\n", "total", human_bytes(double(total())), total());
  s += fmt::format(
      "  activations: one arena for {} worker{} ({} buffers, {} outputs written over their input, {} recomputed); "
      "with no plan {}; at least {} (the most live at once, at the {}: {} activations, {} gradients, {} saved)\n",
      workers, workers == 1 ? "" : "s", net.buffers, net.in_place, net.recomputed, human_bytes(double(net.unplanned)),
      human_bytes(double(net.peak_live)), net.peak_at, human_bytes(double(net.peak_activations)),
      human_bytes(double(net.peak_gradients)), human_bytes(double(net.peak_saved)));
  return s;
}

DeviceMemoryPlan plan_device_memory(const TrainConfig& cfg, Backend& backend, const TrainingLayout& layout) {
  Net net;
  build_model(cfg.net, cfg.model_config(), net);
  net.set_compute_dtype(cfg.compute_dtype());
  net.set_memory_plan(parse_enum<MemoryPlan>(cfg.memory_plan), parse_enum<Recompute>(cfg.recompute));
  net.plan(backend, layout.worker_batch);
  DeviceMemoryPlan p;
  p.device = backend.name();
  p.net = net.memory_report();
  p.workers = layout.workers_per_replica;
  const std::vector<ParamSpec> params = net.param_specs();
  const std::vector<StateSpec> states = net.state_specs();
  std::vector<std::pair<Shape, DType>> ps, ss;
  for (const ParamSpec& s : params) ps.push_back({s.shape, DType::kF32});
  for (const StateSpec& s : states) ss.push_back({s.shape, DType::kF32});
  const size_t param_bytes = slab_bytes(ps), state_bytes = slab_bytes(ss);
  const size_t W = static_cast<size_t>(layout.workers_per_replica);
  const auto slots = Optimizer::slot_suffixes_of(parse_enum<OptimizerKind>(cfg.optimizer)).size();
  std::vector<std::pair<Shape, DType>> slot_tensors;
  for (size_t k = 0; k < slots; ++k) slot_tensors.insert(slot_tensors.end(), ps.begin(), ps.end());
  add(p, "parameters", param_bytes + state_bytes);
  add(p, "optimizer state", slab_bytes(slot_tensors));
  add(p, "moving averages", param_bytes + state_bytes);
  add(p, "parameter gradients", W * p.net.parameter_gradients);
  add(p, "half copies", W * p.net.half_copies);
  add(p, "activations", p.net.arena);
  add(p, "exchange buffers", exchange_bytes(cfg, params, layout));
  const int64_t channels = cfg.model_config().channels;
  const size_t image = static_cast<size_t>(cfg.image_size * cfg.image_size * channels) * sizeof(float);
  const size_t rows = W * static_cast<size_t>(layout.worker_batch);
  size_t input = (cfg.benchmark_mode ? 1 : 2) * rows * image + 2 * rows * sizeof(int32_t);
  if (backend.device().is_cpu())  // the process's two host batches are host memory too: each replica's rows of them
    input += 2 * rows * (image + sizeof(int32_t));
  add(p, "input batches", input);
  add(p, "other", W * p.net.other);
  return p;
}

size_t available_memory(Backend& backend, int host_processes) {
  if (!backend.device().is_cpu()) {
    const std::optional<size_t> free = backend.free_memory();
    return free ? *free : SIZE_MAX;
  }
  size_t available = SIZE_MAX;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  size_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") available = kib * 1024;
  auto read_number = [](const char* path) -> std::optional<size_t> {
    std::ifstream f(path);
    std::string v;
    if (!(f >> v) || v == "max") return std::nullopt;
    try {
      return static_cast<size_t>(std::stoull(v));
    } catch (const std::exception&) {
      return std::nullopt;
    }
  };
  const auto limit = read_number("/sys/fs/cgroup/memory.max"), used = read_number("/sys/fs/cgroup/memory.current");
  if (limit && used) available = std::min(available, *limit > *used ? *limit - *used : 0);
  return available == SIZE_MAX ? available : available / static_cast<size_t>(std::max(1, host_processes));
}

int64_t largest_fitting_worker_batch(const TrainConfig& cfg, Backend& backend, const TrainingLayout& layout,
                                     size_t available, int64_t limit) {
  auto fits = [&](int64_t b) {
    TrainingLayout l = layout;
    l.worker_batch = b;
    return plan_device_memory(cfg, backend, l).total() <= available;
  };
  if (limit < 1 || !fits(1)) return 0;
  int64_t lo = 1, hi = limit;  // fits(lo); the answer is in [lo, hi]
  if (fits(hi)) return hi;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

size_t parse_memory_size(const std::string& text, const std::string& flag) {
  const std::string forms =
      "a number of bytes with an optional unit: 80GiB, 80 GB, 8e10, 512MiB (B, KB/KiB, MB/MiB, "
      "GB/GiB, TB/TiB; KB = 1000 bytes, KiB = 1024)";
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (const std::exception&) {
    TG_THROW("{} '{}' is not a size: {}", flag, text, forms);
  }
  std::string unit;
  for (size_t i = pos; i < text.size(); ++i)
    if (!std::isspace(static_cast<unsigned char>(text[i]))) unit += static_cast<char>(std::tolower(text[i]));
  static const std::pair<const char*, double> units[] = {{"", 1},      {"b", 1},
                                                         {"kb", 1e3},  {"kib", 1024.0},
                                                         {"mb", 1e6},  {"mib", 1048576.0},
                                                         {"gb", 1e9},  {"gib", 1073741824.0},
                                                         {"tb", 1e12}, {"tib", 1099511627776.0}};
  for (const auto& [name, scale] : units)
    if (unit == name) {
      const double bytes = value * scale;
      TG_CHECK(std::isfinite(bytes) && bytes >= 1 && bytes < 1.8e19, "{} '{}' is not a size: {}", flag, text, forms);
      return static_cast<size_t>(bytes);
    }
  TG_THROW("{} '{}' has an unknown unit '{}': {}", flag, text, unit, forms);
}

}  // namespace tg
