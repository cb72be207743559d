// RunCheckpoints: the flags a train_dir's checkpoint fixes, the run's start (resume, fresh parameters; other weights
// are pretrained_start.cc's), its checkpoints (the replicated parts by process 0, per-rank state by every rank),
// and the check that every process starts alike.
#include "src/train/run_checkpoints.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "terngrad/core/human_units.h"
#include "terngrad/data/crc32c.h"
#include "terngrad/train/train_flags.h"

namespace tg {

RunCheckpoints::RunCheckpoints(const TrainConfig& cfg, ReplicaSet& set, LossScaler& scaler, int channels)
    : cfg_(cfg),
      set_(set),
      scaler_(scaler),
      channels_(channels),
      series_(std::make_unique<CheckpointSeries>(cfg.train_dir, cfg.keep_checkpoints)) {}

void RunCheckpoints::adopt_flags(TrainConfig& cfg, int rank) {
  const std::optional<std::string> latest = latest_checkpoint(cfg.train_dir);
  if (!latest) {
    adopt_pretrained_padding(cfg, rank);
    return;
  }
  const CheckpointMeta m = CheckpointReader(*latest).meta();
  // A train_dir with a checkpoint is resumed; a run that started from other weights resumes when it is given the
  // same --pretrained_model_checkpoint_path (the same command), and is refused any other.
  if (!cfg.pretrained_model_checkpoint_path.empty()) {
    const auto was = m.flags.find("pretrained_model_checkpoint_path");
    if (was == m.flags.end() || was->second != cfg.pretrained_model_checkpoint_path)
      TG_THROW(
          "--train_dir {} already holds a checkpoint (step {}){}: that is a resume, not a new run from "
          "--pretrained_model_checkpoint_path {}; leave that flag out to resume, or start in a new --train_dir",
          cfg.train_dir, m.step,
          was == m.flags.end() || was->second.empty() ? "" : " of a run started from " + was->second,
          cfg.pretrained_model_checkpoint_path);
  }
  TrainConfig resolved = cfg;  // the defaults that follow from the network and dataset are no news
  resolved.resolve_defaults();
  std::string taken;
  for (const Flag<TrainConfig>& f : train_flags()) {
    // A resumed run goes on as it was written (kFlagRun; kFlagContinue: unless told otherwise; kFlagResume: the
    // data layout, the same way; another number of workers or processes with --allow_topology_change).
    const bool run = f.has(kFlagRun);
    const bool go_on = f.has(kFlagContinue);
    const bool layout = f.has(kFlagResume) && !f.has(kFlagInternal);
    if (!run && !go_on && !layout) continue;
    const auto was = m.flags.find(f.name);
    if (was == m.flags.end() || was->second == flag_value_text(f, cfg)) continue;
    if (was->second == flag_value_text(f, resolved)) continue;  // e.g. --image_size 0: the size it resolves to
    if (!cfg.flag_given(f.name) || f.has(kFlagInternal)) {      // the program's own (--base_workers): always the run's
      set_flag_from_text(f, cfg, was->second);
      if (!f.has(kFlagInternal)) taken += fmt::format(" --{} {}", f.name, was->second);
      continue;
    }
    if (run)
      TG_THROW(
          "--{} {} differs from the checkpoint's {} in --train_dir {}: a resumed run goes on with the settings it was "
          "written with; leave --{} out (the run continues with {}) or train in another --train_dir",
          f.name, flag_value_text(f, cfg), was->second, cfg.train_dir, f.name, was->second);
  }
  if (!taken.empty() && rank == 0)
    spdlog::info("resuming {} with the checkpoint's flags (not given on this command line):{}", *latest, taken);
}

// A new run from other weights computes what they were trained to compute only with their padding: it takes the
// checkpoint's --padding_style when none is given (an imported PyTorch model's is torch) and warns when another is.
void RunCheckpoints::adopt_pretrained_padding(TrainConfig& cfg, int rank) {
  if (cfg.pretrained_model_checkpoint_path.empty()) return;
  const std::string path = pretrained_checkpoint(cfg);
  const CheckpointMeta m = CheckpointReader(path).meta();
  const auto was = m.flags.find("padding_style");
  const std::string style = was == m.flags.end() ? "tf" : was->second;  // older checkpoints: tf
  if (style == cfg.padding_style) return;
  if (!cfg.flag_given("padding_style")) {
    cfg.padding_style = style;
    if (rank == 0) spdlog::info("--padding_style {}: the padding {} was trained with", style, path);
  } else if (rank == 0) {
    spdlog::warn(
        "--padding_style {} differs from the {} {} was trained with: the network computes something else "
        "from those weights until it has trained on",
        cfg.padding_style, style, path);
  }
}

uint64_t RunCheckpoints::start(const LearningRateSchedule& schedule) {
  // Only the chief writes checkpoints: at its start every temporary checkpoint file is a killed writer's. A new
  // train_dir is created when the run starts (RunReport), after the configuration and the data are checked.
  if (set_.is_chief()) series_->clean();
  uint64_t cursor = 0;
  if (const std::optional<std::string> latest = latest_checkpoint(cfg_.train_dir)) {
    cursor = resume(*latest, schedule);
  } else if (!cfg_.pretrained_model_checkpoint_path.empty()) {
    start_from_pretrained();
  } else {
    for (auto& r : set_.replicas()) {
      r.store->initialize(cfg_.seed);
      set_.create_ema(r);
    }
  }
  verify_processes_agree();
  return cursor;
}

// Every replica takes the checkpoint's parameters, statistics, moving averages and optimizer slots; returns
// the checkpoint's data cursor.
uint64_t RunCheckpoints::resume(const std::string& path, const LearningRateSchedule& schedule) {
  CheckpointReader reader(path);
  const CheckpointMeta& m = reader.meta();
  const bool moved = check_resumable(m);
  say_schedule_change(m, schedule);
  for (auto& r : set_.replicas()) {
    set_.create_ema(r);
    for (CheckpointLayout::Part part : CheckpointLayout::kParts)
      read_slab(reader, *r.backend, checkpoint_slab(r, part),
                [&](const std::string& name) { return CheckpointLayout::name(part, name); });
  }
  // What was read is what was written: every replica's parameters against the header's digest.
  for (Replica& r : set_.replicas()) {
    const std::string got = ReplicaSet::parameter_digest(r);
    TG_CHECK(got == m.parameter_digest,
             "the parameters read from {} have digest {}, its header says {}: the checkpoint is damaged", path, got,
             m.parameter_digest);
  }
  restore_rank_state(m);
  if (scaler_.enabled() && scaler_.restore_from(reader) && set_.is_chief())
    spdlog::info("fp16 loss scale {} restored ({} good steps in a row)", scaler_.scale(), scaler_.good_steps());
  start_step_ = m.step;
  last_digest_ = m.parameter_digest;
  resumed_path_ = path;
  series_->adopt_existing();
  if (set_.is_chief())
    spdlog::info("resumed from {} at step {} (parameter digest {}, the parameters read match it)", path, start_step_,
                 m.parameter_digest);
  if (!moved) return m.data_cursor;
  if (set_.is_chief() && cfg_.keeps_worker_batch())
    spdlog::warn(
        "--elastic_batch per_worker: {} workers of {} examples each (the first layout's {} workers of {}): a "
        "total batch of {}, the learning rate scaled by {:.4g}",
        cfg_.workers(), set_.worker_batch(), cfg_.base_workers, cfg_.batch_size / cfg_.base_workers, cfg_.total_batch(),
        cfg_.learning_rate_scale());
  // Another layout reads other shares of the data: continue each process's share at the position it would
  // have reached had this layout run from the start (the batches differ from an uninterrupted run's).
  const uint64_t cursor = cfg_.benchmark_mode
                              ? static_cast<uint64_t>(m.step)
                              : static_cast<uint64_t>(m.step) * static_cast<uint64_t>(set_.process_batch());
  if (set_.is_chief())
    spdlog::warn(
        "data cursor re-derived for the new layout: {} {} of each process's share (the checkpoint's was "
        "{}); the batches that follow are not those of an uninterrupted run",
        cursor, cfg_.benchmark_mode ? "batches" : "records", m.data_cursor);
  return cursor;
}

// A resume with another --max_steps moves a schedule that spans --max_steps (polynomial, cosine) unless
// --schedule_steps pins it: one line with the rate at the resumed step before and after, and how to keep it.
void RunCheckpoints::say_schedule_change(const CheckpointMeta& m, const LearningRateSchedule& schedule) const {
  const auto was = m.flags.find("max_steps");
  const auto span = m.flags.find("schedule_steps");
  if (!set_.is_chief() || was == m.flags.end() || cfg_.schedule_steps > 0) return;
  const int64_t old_steps = std::stoll(was->second);
  const int64_t old_span = span == m.flags.end() || span->second == "0" ? old_steps : std::stoll(span->second);
  const auto decay = parse_enum<LearningRateDecay>(cfg_.learning_rate_decay_type);
  if (old_span == cfg_.max_steps || parse_enum<OptimizerKind>(cfg_.optimizer) == OptimizerKind::kAdam ||
      (decay != LearningRateDecay::kPolynomial && decay != LearningRateDecay::kCosine))
    return;
  LearningRateOptions lo = schedule.options();
  lo.max_steps = old_span;
  const LearningRateSchedule before(lo);
  spdlog::warn(
      "--max_steps {} (the checkpoint's run: {}): the {} schedule now spans {} steps: the rate at step {} is {:.6g} "
      "(it was {:.6g}); --schedule_steps {} keeps the checkpoint's schedule",
      cfg_.max_steps, old_span, cfg_.learning_rate_decay_type, cfg_.max_steps, m.step, schedule(m.step), before(m.step),
      old_span);
}

// Per-rank state (the scheme's: error-feedback residuals): each replica reads its own file beside the
// checkpoint. A checkpoint of another number of ranks: the scheme says what becomes of it
// (GradientScheme::rank_state_on_resize); kept only where a rank's state has the checkpoint's tensors, refused
// otherwise unless --reset_rank_state, which drops it whatever the scheme says.
void RunCheckpoints::restore_rank_state(const CheckpointMeta& m) {
  GradientScheme& scheme = set_.first().exchanges->exchange().scheme();
  Slab* state = scheme.rank_state();
  if (!state) return;
  const int ranks = set_.topology().num_ranks();
  if (m.rank_files == 0) {
    if (set_.is_chief())
      spdlog::info("the checkpoint holds no per-rank state: {} starts from zero", state_name(*state));
    return;
  }
  auto read_rank = [&](Replica& r, int from, const std::string& only_prefix) {
    const std::string file = checkpoint_rank_path(cfg_.train_dir, m.step, from);
    CheckpointReader reader(file);
    TG_CHECK(reader.meta().step == m.step && reader.meta().rank_files == from,
             "{} is not rank {}'s state of step {} (it says rank {}, step {})", file, from, m.step,
             reader.meta().rank_files, reader.meta().step);
    Slab& s = *r.exchanges->exchange().scheme().rank_state();
    if (only_prefix.empty()) return read_slab(reader, *r.backend, s, [](const std::string& n) { return n; });
    for (int i = 0; i < s.size(); ++i) {
      if (s.entry(i).name.rfind(only_prefix, 0) != 0) continue;
      Buffer host(host_allocator(), s.view(i).bytes());
      const Tensor h(host.data(), s.entry(i).shape, s.entry(i).dtype, Device::cpu());
      reader.read(s.entry(i).name, h);
      r.backend->copy(s.view(i), h);
    }
  };
  if (m.rank_files == ranks) {
    for (Replica& r : set_.replicas()) read_rank(r, r.rank, "");
    if (set_.is_chief()) spdlog::info("per-rank state restored on {} ranks ({})", ranks, state_name(*state));
    return;
  }
  const GradientScheme::ResizePolicy policy = scheme.rank_state_on_resize();
  const bool same_tensors = rank_state_matches(checkpoint_rank_path(cfg_.train_dir, m.step, 0), *state);
  if (cfg_.reset_rank_state || policy.kind == GradientScheme::ResizePolicy::kDrop) {
    TG_CHECK(cfg_.reset_rank_state,
             "the checkpoint in --train_dir {} holds per-rank state of {} ranks ({}), this run has {} ({}): {} cannot "
             "follow a change in the number of ranks; --reset_rank_state drops it (it starts from zero)",
             cfg_.train_dir, m.rank_files, m.topology, ranks, set_.topology().describe(), scheme.describe());
    if (set_.is_chief())
      spdlog::warn("--reset_rank_state: per-rank state of {} ranks dropped; {} starts from zero on {} ranks",
                   m.rank_files, state_name(*state), ranks);
    return;
  }
  TG_CHECK(same_tensors,
           "the checkpoint in --train_dir {} holds per-rank state of {} ranks ({}) whose tensors differ from this "
           "run's {} ranks' ({}; another number of workers per rank): it cannot be split or merged; "
           "--reset_rank_state drops it (it starts from zero)",
           cfg_.train_dir, m.rank_files, m.topology, ranks, set_.topology().describe());
  for (Replica& r : set_.replicas()) {
    if (r.rank < m.rank_files)
      read_rank(r, r.rank, "");
    else if (!policy.replicated_prefix.empty())
      read_rank(r, 0, policy.replicated_prefix);
  }
  if (set_.is_chief())
    spdlog::warn("per-rank state of {} ranks resumed on {} ranks ({}): {}", m.rank_files, ranks, scheme.describe(),
                 policy.bias);
}

// Whether the per-rank state file `file` holds exactly the tensors of `state` (names, shapes, dtypes).
bool RunCheckpoints::rank_state_matches(const std::string& file, const Slab& state) {
  const CheckpointReader reader(file);
  const std::vector<std::string> names = reader.names();
  if (names.size() != static_cast<size_t>(state.size())) return false;
  for (const auto& e : state.entries())
    if (std::find(names.begin(), names.end(), e.name) == names.end() || !(reader.shape(e.name) == e.shape))
      return false;
  return true;
}

// The checkpoint must be of this model and data, and of the same data layout: the data cursor counts this
// process's batches, so resuming is exact only then. With --allow_topology_change the number of workers per
// process and of processes may differ (each difference logged); returns whether they do.
bool RunCheckpoints::check_resumable(const CheckpointMeta& m) const {
  TG_CHECK(m.model == cfg_.net && m.dataset == cfg_.dataset && m.image_size == cfg_.image_size &&
               m.num_classes == cfg_.num_classes,
           "--train_dir {} holds checkpoints of --net {} on --dataset {} (image size {}, {} classes); this run is "
           "--net {} on --dataset {} (image size {}, {} classes): use another --train_dir",
           cfg_.train_dir, m.model, m.dataset, m.image_size, m.num_classes, cfg_.net, cfg_.dataset, cfg_.image_size,
           cfg_.num_classes);
  const std::map<std::string, std::string> now = cfg_.to_flags();
  bool moved = false;
  for (const std::string& key : resume_flag_names()) {
    auto was = m.flags.find(key);
    if (was == m.flags.end() || was->second == now.at(key)) continue;
    const bool layout = key == "num_nodes" || key == "num_processes";
    if (key == "num_processes" && !cfg_.allow_topology_change)
      TG_THROW(
          "this run has {} processes, the checkpoint in --train_dir {} was written by {}: start as many processes, "
          "pass --allow_topology_change to resume on the new layout, or train in another --train_dir",
          now.at(key), cfg_.train_dir, was->second);
    if (!layout || !cfg_.allow_topology_change)
      TG_THROW(
          "--{} {} differs from the checkpoint's {} in --train_dir {}: the resumed run would not see the data the "
          "uninterrupted run sees; leave --{} out (the run continues with {}), {}or train in another --train_dir",
          key, now.at(key), was->second, cfg_.train_dir, key, was->second,
          layout ? "pass --allow_topology_change to resume on the new layout, " : "");
    if (set_.is_chief())
      spdlog::warn("--allow_topology_change: {} {} (the checkpoint's: {}; written on {})",
                   key == "num_nodes" ? "workers per process" : "processes", now.at(key), was->second,
                   m.topology.empty() ? "an unrecorded layout" : m.topology);
    moved = true;
  }
  // Options that may change on resume (the run continues with the new value), said in one line each: the scaler
  // buckets and the warm-up (a checkpoint from before these flags had neither: 0).
  for (const char* key : {"scaler_bucket", "fp32_warmup_steps"}) {
    auto was = m.flags.find(key);
    const std::string before = was == m.flags.end() ? "0" : was->second;
    if (before != now.at(key) && set_.is_chief())
      spdlog::warn("resuming with --{} {}; the checkpoint was written with --{} {}", key, now.at(key), key, before);
  }
  return moved;
}

// Every process must start from the same step and parameters (a train_dir on a node-local disk, or a stale
// network file system, would let one process resume and another start afresh).
void RunCheckpoints::verify_processes_agree() {
  if (!set_.process_comm()) return;
  struct Start {
    int64_t step;
    uint32_t crc, pad;
  } mine{start_step_, ReplicaSet::parameter_crc(set_.first()), 0};
  std::vector<Start> all(static_cast<size_t>(set_.num_processes()));
  set_.process_comm()->allgather(&mine, all.data(), sizeof(Start));
  for (int p = 1; p < set_.num_processes(); ++p)
    TG_CHECK(all[p].step == all[0].step && all[p].crc == all[0].crc,
             "process {} starts at step {} with parameter digest {}, process 0 at step {} with {}: every process "
             "must see the same --train_dir {} (a shared folder)",
             p, all[p].step, digest_hex(all[p].crc), all[0].step, digest_hex(all[0].crc), cfg_.train_dir);
}

std::vector<NamedTensor> RunCheckpoints::host_snapshot(std::vector<Buffer>& storage) {
  std::vector<NamedTensor> out;
  Replica& r = set_.first();
  for (CheckpointLayout::Part part : CheckpointLayout::kParts) {
    const Slab& slab = checkpoint_slab(r, part);
    for (int i = 0; i < slab.size(); ++i) {
      const auto& e = slab.entry(i);
      storage.emplace_back(host_allocator(), static_cast<size_t>(e.shape.numel()) * dtype_size(e.dtype));
      Tensor h(storage.back().data(), e.shape, e.dtype, Device::cpu());
      r.backend->copy(h, slab.view(i));
      out.push_back({CheckpointLayout::name(part, e.name), h});
    }
  }
  if (scaler_.enabled()) scaler_.append_checkpoint_tensors(out, storage);
  return out;
}

// What every file of step `steps_done` says of the run: the model and its data, the step, the topology.
CheckpointMeta RunCheckpoints::checkpoint_meta(int64_t steps_done) const {
  CheckpointMeta meta;
  meta.model = cfg_.net;
  meta.dataset = cfg_.dataset;
  meta.image_size = cfg_.image_size;
  meta.channels = channels_;
  meta.num_classes = cfg_.num_classes;
  meta.step = steps_done;
  meta.topology = set_.topology().describe();
  return meta;
}

// A checkpoint of step `steps_done`: first every rank's per-rank state (each process writes its replicas'
// files), then, once every process has (a barrier), the chief writes the replicated parts and the index. A run
// killed in between leaves rank files without their checkpoint (removed at the next start) and the previous
// checkpoint intact. No checkpoint is written after a step whose shared scalers were not finite.
void RunCheckpoints::save(int64_t steps_done, uint64_t data_cursor) {
  last_save_ = Clock::now();
  last_saved_step_ = steps_done;
  for (const Worker& wk : set_.workers()) wk.net->losses();  // a non-finite loss stops the run before it is saved
  check_finite_before_save(steps_done);
  const bool per_rank = set_.first().exchanges->exchange().scheme().rank_state() != nullptr;
  if (per_rank) {
    for (Replica& r : set_.replicas()) save_rank_state(r, steps_done);
    if (set_.process_comm()) set_.process_comm()->barrier();
  }
  if (!set_.is_chief()) {  // the replicated parts are identical everywhere: process 0 writes them
    last_digest_.clear();
    return;
  }
  std::vector<Buffer> storage;
  std::vector<NamedTensor> tensors = host_snapshot(storage);
  CheckpointMeta meta = checkpoint_meta(steps_done);
  meta.data_cursor = data_cursor;
  meta.flags = cfg_.to_flags();
  meta.rank_files = per_rank ? set_.topology().num_ranks() : 0;
  last_digest_ = series_->write(steps_done, meta, tensors);
}

// Replica r's per-rank state at step `steps_done`, in its own file (same format and atomic protocol as a
// checkpoint; its header names its rank and step).
void RunCheckpoints::save_rank_state(Replica& r, int64_t steps_done) {
  Slab& state = *r.exchanges->exchange().scheme().rank_state();
  std::vector<Buffer> storage;
  std::vector<NamedTensor> tensors;
  for (int i = 0; i < state.size(); ++i) {
    const auto& e = state.entry(i);
    storage.emplace_back(host_allocator(), static_cast<size_t>(e.shape.numel()) * dtype_size(e.dtype));
    Tensor h(storage.back().data(), e.shape, e.dtype, Device::cpu());
    r.backend->copy(h, state.view(i));
    tensors.push_back({e.name, h});
  }
  series_->write_rank_file(steps_done, r.rank, checkpoint_meta(steps_done), tensors);
}

// The scheme's device flag of non-finite shared scalers, over every replica of every process (the same verdict
// everywhere, so no process is left waiting in the barrier of the next save): a GPU does not check the scalers
// on the host each step, so a NaN gradient reaches the weights; it must not reach a checkpoint.
void RunCheckpoints::check_finite_before_save(int64_t steps_done) {
  int32_t bad = 0;
  std::string tensor;
  for (Replica& r : set_.replicas()) {
    if (!r.exchanges->exchange().take_nonfinite_flag()) continue;
    bad = 1;
    for (const TensorSummary& q : r.exchanges->exchange().summaries())
      if (tensor.empty() && !std::isfinite(q.value))
        tensor = fmt::format("{} of tensor {}", q.quantity, set_.policy().tensors()[q.tensor].name);
  }
  if (set_.process_comm()) set_.process_comm()->allreduce(&bad, 1, DType::kI32, ReduceOp::kMax);
  TG_CHECK(bad == 0,
           "a shared gradient scaler was not finite at a step up to {} ({}): no checkpoint written at step {}; the "
           "last checkpoint ({}) stays intact",
           steps_done, tensor.empty() ? "on another process" : tensor, steps_done, series_->last());
}

// "error_feedback (12 tensors, 4.8 MiB)": the state's name prefix, size and bytes.
std::string RunCheckpoints::state_name(const Slab& state) const {
  const std::string first = state.size() > 0 ? state.entry(0).name : std::string("per-rank state");
  return fmt::format("{} ({} tensors, {})", first.substr(0, first.find('/')), state.size(),
                     human_bytes(static_cast<double>(state.bytes())));
}

}  // namespace tg
