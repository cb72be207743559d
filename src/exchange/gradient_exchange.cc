// GradientExchange: the buckets, the order in which their schemes' stages run on the compute thread and the
// communication thread, and where the step's time and bytes go.
#include "terngrad/exchange/gradient_exchange.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "terngrad/comm/communication_thread.h"
#include "terngrad/core/error.h"
#include "terngrad/core/timeline.h"
#include "terngrad/exchange/scheme_registry.h"

namespace tg {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

ExchangeMode resolve_exchange_mode(ExchangeMode m, int num_workers) {
  if (m != ExchangeMode::kAuto) return m;
  return num_workers < 8 ? ExchangeMode::kAllgather2 : ExchangeMode::kAllreduce8;
}

void SchemeContext::copy_to_other_targets(TensorRange r) const {
  const std::vector<Tensor>& out = grads[targets[0]];
  for (size_t k = 1; k < targets.size(); ++k)
    for (int i = r.begin; i < r.end; ++i) backend->copy(grads[targets[k]][i], out[i]);
}

GradientExchange::GradientExchange(Backend& backend, const CompressionPolicy& policy,
                                   std::vector<std::vector<Tensor>> worker_grads, std::vector<int> targets,
                                   Communicator* world, const ExchangeOptions& options, Timeline* timeline)
    : GradientExchange(backend, policy, std::move(worker_grads), std::move(targets),
                       ExchangeComms{world, nullptr, nullptr}, options, timeline) {}

GradientExchange::GradientExchange(Backend& backend, const CompressionPolicy& policy,
                                   std::vector<std::vector<Tensor>> worker_grads, std::vector<int> targets,
                                   const ExchangeComms& comms, const ExchangeOptions& options, Timeline* timeline)
    : be_(backend), policy_(policy), timeline_(timeline) {
  TG_CHECK(!worker_grads.empty(), "gradient exchange: no local workers");
  for (const auto& g : worker_grads) policy_.check_grads(g, be_.device());
  TG_CHECK(!targets.empty(), "gradient exchange: no target worker for the average");
  for (int t : targets)
    TG_CHECK(t >= 0 && t < static_cast<int>(worker_grads.size()), "gradient exchange: target worker {} outside [0, {})",
             t, worker_grads.size());
  TG_CHECK(std::isfinite(options.bucket_mb) && options.bucket_mb > 0,
           "--bucket_mb must be a positive number of MiB, got {}", options.bucket_mb);
  ctx_.backend = &be_;
  ctx_.policy = &policy_;
  ctx_.grads = std::move(worker_grads);
  for (const auto& g : ctx_.grads) ctx_.workers.push_back(&g);
  ctx_.targets = std::move(targets);
  auto group = [](Communicator* c) { return c && c->size() > 1 ? c : nullptr; };
  ctx_.comms = {group(comms.world), group(comms.local), group(comms.cross)};
  ctx_.local_workers = static_cast<int>(ctx_.grads.size());
  const int ranks = ctx_.comms.world ? ctx_.comms.world->size() : 1;
  const int rank = ctx_.comms.world ? ctx_.comms.world->rank() : 0;
  ctx_.num_workers = ranks * ctx_.local_workers;
  ctx_.first_worker = rank * ctx_.local_workers;
  ctx_.options = options;
  for (Communicator* c : {ctx_.comms.world, ctx_.comms.local, ctx_.comms.cross})
    if (c && std::find(groups_.begin(), groups_.end(), c) == groups_.end()) groups_.push_back(c);
  has_groups_ = !groups_.empty();

  ExchangeLayout layout;
  layout.num_workers = ctx_.num_workers;
  layout.num_nodes = ctx_.comms.cross ? ctx_.comms.cross->size() : 1;
  layout.ranks_per_node = ctx_.comms.local ? ctx_.comms.local->size() : 1;
  scheme_ = make_gradient_scheme(scheme_name_for(policy.flags().grad_bits, options.exchange, layout), ctx_);
  stages_ = scheme_->stages();
  for (size_t s = 0; s < stages_.size(); ++s)
    if (stages_[s].kind == StageKind::kCollective) collective_stages_.push_back(static_cast<int>(s));

  const bool overlap = options.overlap && has_groups_ && !collective_stages_.empty();
  const bool stream_engine = options.overlap_engine == OverlapEngine::kStream ||
                             (options.overlap_engine == OverlapEngine::kAuto && be_.has_side_stream());
  plan_buckets(options.bucket_mb, !overlap);
  std::vector<TensorRange> ranges;
  for (const Bucket& b : buckets_) ranges.push_back(b.range);
  scheme_->plan(ranges);
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (int s : collective_stages_) post_order_.push_back(static_cast<int64_t>(b * stages_.size()) + s);
  on_side_stream_ = overlap && stream_engine;
  if (overlap && !stream_engine)
    comm_thread_ = std::make_unique<CommunicationThread>(static_cast<int>(post_order_.size()));
  if (timeline_) {
    exchange_track_ = timeline_->add_track(fmt::format("exchange (rank {})", rank));
    if (comm_thread_) comm_track_ = timeline_->add_track(fmt::format("communication (rank {})", rank));
    if (on_side_stream_) side_track_ = timeline_->add_track(fmt::format("side stream (rank {})", rank));
  }
}

GradientExchange::~GradientExchange() = default;

// Buckets in backward order: from the last tensor down, a bucket closes once it holds bucket_mb MiB of fp32
// gradient. A tensor that would take the open bucket past the limit closes it first (Horovod's fusion rule), so a
// tensor larger than the limit travels alone: the smaller ones before it leave as soon as backward has made them,
// not after it (AlexNet's logits no longer wait for fc7's backward), and the hierarchical exchange reduces such a
// tensor in place (hierarchical_scheme.cc).
void GradientExchange::plan_buckets(double bucket_mb, bool one_bucket) {
  const int T = policy_.num_tensors();
  const double limit = one_bucket ? std::numeric_limits<double>::infinity() : bucket_mb * 1024.0 * 1024.0;
  int end = T;
  double bytes = 0;
  auto close_at = [&](int begin) {  // the open bucket is tensors [begin, end)
    Bucket b;
    b.range = {begin, end};
    buckets_.push_back(b);
    end = begin;
    bytes = 0;
  };
  for (int i = T - 1; i >= 0; --i) {
    const double tensor_bytes = 4.0 * static_cast<double>(policy_.tensors()[i].numel);
    if (bytes > 0 && bytes + tensor_bytes > limit) close_at(i + 1);
    bytes += tensor_bytes;
    if (bytes >= limit || i == 0) close_at(i);
  }
  if (T == 0) buckets_.push_back(Bucket{});
}

// ---- stages -----------------------------------------------------------------------------------------------
void GradientExchange::run_compute(Bucket& b) {
  const int index = static_cast<int>(&b - buckets_.data());
  const SchemeStage& st = stages_[b.stage];
  const auto t0 = Clock::now();
  scheme_->run_stage(b.stage, index);
  const auto t1 = Clock::now();
  times_.add(st.phase, seconds_between(t0, t1));
  if (timeline_ && timeline_->recording()) timeline_->record(exchange_track_, st.name, t0, t1, index);
  ++b.stage;
}

// A collective called on this thread: blocked for as long as it is in flight.
void GradientExchange::run_blocking(Bucket& b) {
  const int index = static_cast<int>(&b - buckets_.data());
  const auto t0 = Clock::now();
  const double cpu0 = thread_cpu_seconds();
  if (has_groups_) scheme_->run_stage(b.stage, index);
  const auto t1 = Clock::now();
  if (has_groups_) {
    times_.add(Phase::kCommCpu, thread_cpu_seconds() - cpu0);
    times_.add(Phase::kCommBlocked, seconds_between(t0, t1));
    times_.add(Phase::kCommInFlight, seconds_between(t0, t1));
    if (timeline_ && timeline_->recording()) timeline_->record(exchange_track_, stages_[b.stage].name, t0, t1, index);
  }
  ++b.stage;
}

void GradientExchange::run_posted(void* self, int64_t job) {
  auto* ex = static_cast<GradientExchange*>(self);
  const int64_t S = static_cast<int64_t>(ex->stages_.size());
  ex->scheme_->run_stage(static_cast<int>(job % S), static_cast<int>(job / S));
}

// Posts collectives in the fixed order (bucket by bucket, each bucket's collective stages in turn): the next
// one goes out only when its bucket has reached that stage, and only after every collective before it.
void GradientExchange::post_next() {
  const int64_t S = static_cast<int64_t>(stages_.size());
  while (next_post_ < post_order_.size()) {
    const int64_t job = post_order_[next_post_];
    Bucket& b = buckets_[job / S];
    if (!b.ready || b.posted || b.stage != job % S) return;
    b.ticket = comm_thread_->post({&run_posted, this, job});
    b.posted = true;
    ++next_post_;
  }
}

void GradientExchange::collect(Bucket& b) {
  const auto begin = comm_thread_->begin_time(b.ticket), end = comm_thread_->end_time(b.ticket);
  times_.add(Phase::kCommInFlight, seconds_between(begin, end));
  times_.add(Phase::kCommCpu, comm_thread_->cpu_seconds(b.ticket));
  if (timeline_ && timeline_->recording())
    timeline_->record(comm_track_, stages_[b.stage].name, begin, end, &b - buckets_.data());
  b.posted = false;
  ++b.stage;
}

namespace {
// A bucket's time on the side stream: the backend's ops and the groups' collectives go there, and back to the main
// stream at close() (which may throw) or, when a stage threw, in the destructor (which never does).
class SideStreamScope {
 public:
  SideStreamScope(Backend& be, const std::vector<Communicator*>& groups) : be_(be), groups_(groups) {
    be_.enter_side_stream();
    for (Communicator* g : groups_) previous_.push_back(g->use_stream(be_.native_stream()));
  }
  void close() {
    restore_groups();
    closed_ = true;
    be_.leave_side_stream();
  }
  ~SideStreamScope() {
    if (closed_) return;
    restore_groups();
    be_.leave_side_stream_after_error();
  }
  SideStreamScope(const SideStreamScope&) = delete;
  SideStreamScope& operator=(const SideStreamScope&) = delete;

 private:
  void restore_groups() noexcept {
    for (size_t k = 0; k < previous_.size(); ++k) groups_[k]->use_stream(previous_[k]);
  }
  Backend& be_;
  const std::vector<Communicator*>& groups_;
  std::vector<void*> previous_;
  bool closed_ = false;
};
}  // namespace

// Every stage of a complete bucket in order, enqueued on the side stream from the calling thread: compute stages
// as ops, collective stages as the groups' (stream-ordered) collectives. On the CPU each runs at once.
void GradientExchange::run_on_side_stream(Bucket& b) {
  const int S = static_cast<int>(stages_.size());
  const int index = static_cast<int>(&b - buckets_.data());
  const bool spans = timeline_ && timeline_->recording();
  SideStreamScope scope(be_, groups_);
  uint64_t mark = spans ? be_.record_mark() : 0;
  while (b.stage < S) {
    const char* name = stages_[b.stage].name;
    if (stages_[b.stage].kind == StageKind::kCompute)
      run_compute(b);
    else
      run_blocking(b);
    if (!spans) continue;
    const uint64_t next = be_.record_mark();
    pending_spans_.push_back({timeline_->current_step(), index, name, mark, next});
    mark = next;
  }
  scope.close();
}

// Spans whose marks the device has passed go onto the timeline; the others wait (a bounded list: a mark the backend's
// ring has reused never resolves, so the oldest are dropped past a limit).
void GradientExchange::record_device_spans() {
  constexpr size_t kMaxPending = 4096;
  if (pending_spans_.size() > kMaxPending)
    pending_spans_.erase(pending_spans_.begin(), pending_spans_.end() - static_cast<std::ptrdiff_t>(kMaxPending));
  std::vector<DeviceSpan> left;
  for (const DeviceSpan& s : pending_spans_) {
    const auto t0 = be_.mark_time(s.begin), t1 = be_.mark_time(s.end);
    if (t0 && t1)
      timeline_->record_for_step(s.step, side_track_, s.name, *t0, *t1, s.bucket, "bucket", "device");
    else
      left.push_back(s);
  }
  pending_spans_.swap(left);
}

void GradientExchange::flush_timeline() {
  if (pending_spans_.empty()) return;
  be_.synchronize();
  record_device_spans();
  pending_spans_.clear();  // what the device passed is recorded; anything else can no longer be
}

// Moves one bucket as far as it can go without waiting: compute stages run, a finished collective is
// collected, the next collective is posted when its turn has come.
bool GradientExchange::advance_bucket(Bucket& b) {
  bool moved = false;
  const int S = static_cast<int>(stages_.size());
  while (b.ready && b.stage < S) {
    if (stages_[b.stage].kind == StageKind::kCompute) {
      run_compute(b);
    } else if (!comm_thread_) {
      run_blocking(b);
    } else if (b.posted) {
      if (!comm_thread_->done(b.ticket)) break;
      collect(b);
    } else {
      post_next();
      if (!b.posted) break;  // an earlier collective of the fixed order is not out yet
      continue;              // posted: not moved until it comes back
    }
    moved = true;
  }
  return moved;
}

bool GradientExchange::advance(bool block) {
  bool moved = false;
  for (Bucket& b : buckets_) moved = advance_bucket(b) || moved;
  if (comm_thread_) post_next();
  if (moved || !block || !comm_thread_) return moved;
  // Nothing could move. Rather than sit waiting, decode a finished bucket's average that was left coded for the
  // optimizer (CodedUpdate::decode_deferred: the same bits; what arrives after the wait stays coded and is
  // decoded inside the update, what arrived before costs nothing the step was not waiting anyway).
  const int S = static_cast<int>(stages_.size());
  for (Bucket& b : buckets_) {
    if (!coded_ || b.stage != S) continue;
    const auto t0 = Clock::now();
    if (!coded_->decode_deferred(static_cast<int>(&b - buckets_.data()))) continue;
    const auto t1 = Clock::now();
    times_.add(Phase::kDecode, seconds_between(t0, t1));
    if (timeline_ && timeline_->recording())
      timeline_->record(exchange_track_, "decode while waiting", t0, t1, &b - buckets_.data());
    return true;
  }
  // Wait for the oldest collective in flight (jobs finish in post order).
  for (Bucket& b : buckets_) {
    if (!b.posted) continue;
    const auto t0 = Clock::now();
    comm_thread_->wait(b.ticket);
    const auto t1 = Clock::now();
    times_.add(Phase::kCommBlocked, seconds_between(t0, t1));
    if (timeline_ && timeline_->recording()) timeline_->record(exchange_track_, "wait", t0, t1, &b - buckets_.data());
    return true;
  }
  return false;
}

bool GradientExchange::done() const {
  return std::all_of(buckets_.begin(), buckets_.end(),
                     [&](const Bucket& b) { return b.stage == static_cast<int>(stages_.size()); });
}

// ---- the step ----------------------------------------------------------------------------------------------
void GradientExchange::begin(uint32_t step) {
  TG_CHECK(!in_step_, "gradient exchange: begin() of step {} while step {} is still in progress", step, step_);
  in_step_ = true;
  step_ = step;
  ready_from_ = policy_.num_tensors();
  next_post_ = 0;
  for (Bucket& b : buckets_) b = Bucket{b.range};
  times_.clear();
  Communicator* g[3] = {ctx_.comms.world, ctx_.comms.local, ctx_.comms.cross};
  for (int k = 0; k < 3; ++k) wire_before_[k] = g[k] ? g[k]->stats().moved_bytes : 0;
  if (!pending_spans_.empty()) record_device_spans();  // the last steps' side-stream spans the device has passed
  scheme_->begin_step(step);
}

void GradientExchange::tensors_ready(int first) {
  TG_CHECK(in_step_, "gradient exchange: tensors_ready() outside a step");
  TG_CHECK(first >= 0 && first <= policy_.num_tensors(), "gradient exchange: tensor {} outside [0, {}]", first,
           policy_.num_tensors());
  ready_from_ = std::min(ready_from_, first);
  for (Bucket& b : buckets_)
    if (!b.ready && b.range.begin >= ready_from_) b.ready = true;
  if (comm_thread_) advance(false);
  if (on_side_stream_)  // complete buckets form a prefix (bucket 0 holds the last tensors): enqueued in order
    for (Bucket& b : buckets_)
      if (b.ready && b.stage == 0) run_on_side_stream(b);
}

void GradientExchange::progress() {
  TG_CHECK(in_step_, "gradient exchange: progress() outside a step");
  if (comm_thread_) advance(false);
}

ExchangeStats GradientExchange::finish() {
  TG_CHECK(in_step_, "gradient exchange: finish() outside a step");
  if (ready_from_ > 0) tensors_ready(0);  // whatever the caller did not report is final now
  while (!done()) TG_CHECK(advance(true), "gradient exchange: no bucket can move at step {} (internal error)", step_);
  if (on_side_stream_) be_.join_side_stream();  // what follows on the main stream (the update) sees the average
  in_step_ = false;
  ExchangeStats st = scheme_->byte_model();
  Communicator* g[3] = {ctx_.comms.world, ctx_.comms.local, ctx_.comms.cross};
  uint64_t delta[3] = {0, 0, 0};
  for (int k = 0; k < 3; ++k) delta[k] = g[k] ? g[k]->stats().moved_bytes - wire_before_[k] : 0;
  // Several views of one group (one node: world == local) count once.
  if (g[1] == g[0]) delta[1] = 0;
  if (g[2] == g[0]) delta[2] = 0;
  st.process_wire_bytes = delta[0] + delta[1] + delta[2];
  // The world group's rings run in rank order with the ranks of a node next to each other: a rank receives
  // from its predecessor, which is on another node only for the first rank of a node.
  const bool several_nodes = ctx_.comms.cross != nullptr;
  const bool first_of_node = !ctx_.comms.local || ctx_.comms.local->rank() == 0;
  const bool world_crosses = g[0] && (several_nodes ? first_of_node : false);
  st.intra_node_bytes = delta[1] + (world_crosses ? 0 : delta[0]);
  st.inter_node_bytes = delta[2] + (world_crosses ? delta[0] : 0);
  if (g[0] && !ctx_.comms.local && !ctx_.comms.cross) {  // a flat job: every rank is a node of its own
    st.intra_node_bytes = 0;
    st.inter_node_bytes = delta[0];
  }
  return st;
}

void GradientExchange::defer_decode() {
  CodedUpdate* coded = scheme_->coded_update();
  TG_CHECK(coded, "gradient exchange: the {} scheme cannot leave its average coded", scheme_->name());
  TG_CHECK(!in_step_, "gradient exchange: defer_decode() inside a step");
  coded->defer_decode();
  coded_ = coded;
}

const std::vector<CodedAverage>* GradientExchange::coded_averages() const {
  return coded_ && !coded_->coded_averages().empty() ? &coded_->coded_averages() : nullptr;
}

void GradientExchange::decode_deferred_now() {
  TG_CHECK(!in_step_, "gradient exchange: decode_deferred_now() inside a step (after finish() only)");
  if (!coded_) return;
  const auto t0 = Clock::now();
  bool any = false;
  for (int b = 0; b < num_buckets(); ++b) any = coded_->decode_deferred(b) || any;
  if (any) times_.add(Phase::kDecode, seconds_between(t0, Clock::now()));
}

void GradientExchange::apply_weight_decay(WeightDecayTerms terms) {
  TG_CHECK(scheme_->applies_weight_decay(), "gradient exchange: the {} scheme does not apply weight decay",
           scheme_->name());
  TG_CHECK(!in_step_, "gradient exchange: apply_weight_decay() inside a step");
  const size_t T = static_cast<size_t>(policy_.num_tensors());
  TG_CHECK(terms.params.size() == T && terms.coefficients.size() == T,
           "gradient exchange: weight decay for {} / {} tensors, the policy has {}", terms.params.size(),
           terms.coefficients.size(), T);
  for (size_t i = 0; i < T; ++i) {
    if (terms.coefficients[i] == 0.f) continue;
    TG_CHECK(std::isfinite(terms.coefficients[i]) && terms.coefficients[i] > 0.f,
             "gradient exchange: weight decay {} of tensor '{}' is not a positive number", terms.coefficients[i],
             policy_.tensors()[i].name);
    const Tensor& p = terms.params[i];
    TG_CHECK(
        p.defined() && p.dtype() == DType::kF32 && p.numel() == ctx_.grads[0][i].numel() && p.device() == be_.device(),
        "gradient exchange: the decayed parameter of tensor '{}' is {}, its gradient {}", policy_.tensors()[i].name,
        p.defined() ? p.str() : std::string("undefined"), ctx_.grads[0][i].str());
  }
  weight_decay_ = std::move(terms);
  ctx_.weight_decay = &weight_decay_;
}

ExchangeStats GradientExchange::run(uint32_t step) {
  begin(step);
  tensors_ready(0);
  return finish();
}

// ---- summaries ---------------------------------------------------------------------------------------------
std::vector<TensorSummary> GradientExchange::summaries() const { return scheme_->summaries(); }

bool GradientExchange::take_nonfinite_flag() {
  const Tensor f = scheme_->nonfinite_flag();
  if (!f.defined()) return false;
  int32_t v = 0;
  be_.copy(Tensor(&v, Shape{1}, DType::kI32, Device::cpu()), f);
  if (v != 0) be_.zero(f);
  return v != 0;
}

}  // namespace tg
