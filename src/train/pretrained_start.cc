// RunCheckpoints: a new run from another run's weights (--pretrained_model_checkpoint_path, --fine_tune).
//
// The run starts at step 0 with a fresh optimizer state, data cursor and learning-rate schedule; the checkpoint
// gives the parameters, the batch-norm statistics and their moving averages. (The reference restored the whole
// graph, its global step included, and went on at step + 1: the schedule then continued from where the other
// run had decayed it, which is not what a run on new data wants.) With --fine_tune the logits layers (logits/,
// and inception_v3's AuxLogits/logits/) start as a fresh run's, so the classes may differ.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "src/train/run_checkpoints.h"

namespace tg {

namespace fs = std::filesystem;

namespace {
// A tensor of the logits layers, by its name in a slab (a parameter, or its moving average's shadow).
bool of_logits(const std::string& name) {
  return name.rfind("logits/", 0) == 0 || name.rfind("AuxLogits/logits/", 0) == 0;
}

std::string listed(const std::vector<std::string>& names) {
  if (names.empty()) return "none";
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}
}  // namespace

// The checkpoint file of --pretrained_model_checkpoint_path: the file itself, or a train_dir's latest.
std::string RunCheckpoints::pretrained_checkpoint(const TrainConfig& cfg) {
  const std::string& p = cfg.pretrained_model_checkpoint_path;
  if (fs::is_directory(p)) {
    const std::optional<std::string> latest = latest_checkpoint(p);
    if (!latest) TG_THROW("--pretrained_model_checkpoint_path {} is a folder without a checkpoint", p);
    return *latest;
  }
  if (!fs::is_regular_file(p))
    TG_THROW("--pretrained_model_checkpoint_path {} is neither a checkpoint nor a folder", p);
  return p;
}

void RunCheckpoints::start_from_pretrained() {
  const std::string path = pretrained_checkpoint(cfg_);
  const CheckpointReader reader(path);
  const CheckpointMeta& m = reader.meta();
  if (m.model != cfg_.net)
    TG_THROW("--pretrained_model_checkpoint_path {} holds --net {}, this run is --net {}", path, m.model, cfg_.net);
  if (!cfg_.fine_tune && m.num_classes != cfg_.num_classes)
    TG_THROW(
        "--pretrained_model_checkpoint_path {} has {} classes, this run {}: --fine_tune starts the logits layer "
        "afresh for the new classes",
        path, m.num_classes, cfg_.num_classes);
  const std::vector<std::string> in_file = reader.names();
  const std::set<std::string> available(in_file.begin(), in_file.end());
  std::set<std::string> used;
  std::vector<std::string> missing, initialised;
  int64_t restored = 0;
  for (size_t k = 0; k < set_.replicas().size(); ++k) {
    Replica& r = set_.replicas()[k];
    r.store->initialize(cfg_.seed);
    set_.create_ema(r);  // the shadows of what the checkpoint does not give start at the fresh values
    for (CheckpointLayout::Part part : {CheckpointLayout::kParams, CheckpointLayout::kState, CheckpointLayout::kEma}) {
      Slab& slab = checkpoint_slab(r, part);
      size_t largest = 0;  // one host buffer for the slab's tensors, as read_slab
      for (const Slab::Entry& e : slab.entries())
        largest = std::max(largest, static_cast<size_t>(e.shape.numel()) * dtype_size(e.dtype));
      Buffer host(host_allocator(), largest);
      for (int i = 0; i < slab.size(); ++i) {
        const Slab::Entry& e = slab.entry(i);
        const std::string name = CheckpointLayout::name(part, e.name);
        if (cfg_.fine_tune && of_logits(e.name)) {
          if (k == 0) initialised.push_back(name);
          continue;
        }
        if (!available.count(name)) {
          if (k == 0) missing.push_back(name);
          continue;
        }
        if (!missing.empty()) continue;  // refused below, listing every missing name
        const Tensor h(host.data(), e.shape, e.dtype, Device::cpu());
        reader.read(name, h);  // a shape or dtype that differs: one line naming the tensor and both
        r.backend->copy(slab.view(i), h);
        used.insert(name);
        if (k == 0) ++restored;
      }
    }
  }
  if (!missing.empty())
    TG_THROW("--pretrained_model_checkpoint_path {} lacks {} tensor{} of --net {}: {}", path, missing.size(),
             missing.size() == 1 ? "" : "s", cfg_.net, listed(missing));
  std::vector<std::string> ignored;
  for (const std::string& n : in_file)
    if (!used.count(n) && !CheckpointLayout::is_in(CheckpointLayout::kSlots, n) &&
        std::find(initialised.begin(), initialised.end(), n) == initialised.end())
      ignored.push_back(n);
  if (set_.is_chief())
    spdlog::info(
        "started from {} ({} on {}, step {}, parameter digest {}): restored {} tensors (weights, batch-norm "
        "statistics, their moving averages); initialised afresh (--fine_tune): {}; ignored: {}; the optimizer state, "
        "the data cursor and the learning-rate schedule start anew at step 0",
        path, m.model, m.dataset, m.step, m.parameter_digest, restored, listed(initialised), listed(ignored));
}

}  // namespace tg
