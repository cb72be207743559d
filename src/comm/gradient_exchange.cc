// GradientExchange: buckets, their stages (scalers, share, encode, exchange, decode) and the order in which
// the compute thread and the communication thread move them along.
#include "terngrad/comm/gradient_exchange.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "terngrad/comm/communication_thread.h"
#include "terngrad/core/error.h"
#include "terngrad/core/timeline.h"

namespace tg {

ExchangeMode resolve_exchange_mode(ExchangeMode m, int num_workers) {
  if (m != ExchangeMode::kAuto) return m;
  return num_workers < 8 ? ExchangeMode::kAllgather2 : ExchangeMode::kAllreduce8;
}

namespace {
constexpr size_t kAlign = 64;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

GradientExchange::GradientExchange(Backend& backend, const CompressionPolicy& policy,
                                   std::vector<std::vector<Tensor>> worker_grads, std::vector<int> targets,
                                   Communicator* processes, const ExchangeOptions& options, Timeline* timeline)
    : be_(backend),
      on_host_(backend.device().is_cpu()),
      codec_(policy, options.seed),
      grads_(std::move(worker_grads)),
      targets_(std::move(targets)),
      processes_(processes),
      timeline_(timeline) {
  TG_CHECK(!grads_.empty(), "gradient exchange: no local workers");
  for (const auto& g : grads_) codec_.check_grads(g, be_.device());
  for (const auto& g : grads_) grad_ptrs_.push_back(&g);
  TG_CHECK(!targets_.empty(), "gradient exchange: no target worker for the average");
  for (int t : targets_)
    TG_CHECK(t >= 0 && t < static_cast<int>(grads_.size()), "gradient exchange: target worker {} outside [0, {})", t,
             grads_.size());
  TG_CHECK(std::isfinite(options.bucket_mb) && options.bucket_mb > 0,
           "--bucket_mb must be a positive number of MiB, got {}", options.bucket_mb);
  if (processes_ && processes_->size() > 1) {
    num_processes_ = processes_->size();
    process_rank_ = processes_->rank();
  } else {
    processes_ = nullptr;
  }
  local_ = static_cast<int>(grads_.size());
  num_workers_ = num_processes_ * local_;
  mode_ = resolve_exchange_mode(options.mode, num_workers_);
  if (mode_ == ExchangeMode::kAllreduce8 && policy.num_ternary() > 0)
    TG_CHECK(num_workers_ <= 127,
             "--exchange allreduce8 sums int8 codes, exact up to 127 workers; {} workers need allgather2",
             num_workers_);

  const bool overlap = options.overlap && processes_ != nullptr;
  plan_buckets(options.bucket_mb, !overlap);
  allocate_buffers();
  host_scalers_.assign(policy.num_ternary(), 0.f);
  host_zero_codes_.assign(policy.num_ternary(), 0);
  if (overlap) comm_thread_ = std::make_unique<CommunicationThread>(2 * num_buckets());
  if (timeline_) {
    exchange_track_ = timeline_->add_track(fmt::format("exchange (process {})", process_rank_));
    if (overlap) comm_track_ = timeline_->add_track(fmt::format("communication (process {})", process_rank_));
  }

  // The byte model of a step, per worker over all N workers (communicator.h), one collective per fused buffer.
  const int n = num_workers_;
  ExchangeStats& s = step_stats_;
  auto allreduce = [&](uint64_t bytes) {
    s.payload_bytes += bytes;
    s.moved_bytes += Communicator::allreduce_moved_bytes(bytes, n);
  };
  if (policy.num_ternary() > 0) {
    allreduce(4ull * policy.num_ternary());
    if (mode_ == ExchangeMode::kAllgather2) {
      s.payload_bytes += policy.packed_bytes();
      s.moved_bytes += Communicator::allgather_moved_bytes(policy.packed_bytes(), n);
    } else {
      allreduce(4ull * policy.packed_bytes());
    }
  }
  if (policy.f16_elements() > 0) allreduce(2ull * policy.f16_elements());
  if (policy.f32_elements() > 0) allreduce(4ull * policy.f32_elements());
  s.fp32_payload_bytes = 4ull * policy.total_elements();
  s.fp32_moved_bytes = Communicator::allreduce_moved_bytes(s.fp32_payload_bytes, n);
}

GradientExchange::~GradientExchange() = default;

// Buckets in backward order: from the last tensor down, a bucket closes once it holds bucket_mb MiB of fp32
// gradient (the tensor that crosses the limit included, as DDP's buckets).
void GradientExchange::plan_buckets(double bucket_mb, bool one_bucket) {
  const int T = codec_.policy().num_tensors();
  const double limit = one_bucket ? std::numeric_limits<double>::infinity() : bucket_mb * 1024.0 * 1024.0;
  int end = T;
  double bytes = 0;
  for (int i = T - 1; i >= 0; --i) {
    bytes += 4.0 * static_cast<double>(codec_.policy().tensors()[i].numel);
    if (bytes >= limit || i == 0) {
      Bucket b;
      b.range = {i, end};
      b.layout = codec_.layout(b.range);
      buckets_.push_back(b);
      end = i;
      bytes = 0;
    }
  }
  if (T == 0) {
    Bucket b;
    b.layout = codec_.layout(b.range);
    buckets_.push_back(b);
  }
}

void GradientExchange::allocate_buffers() {
  size_t total = 0;
  auto reserve = [&](size_t bytes) {
    const size_t at = total;
    total += align_up(bytes);
    return at;
  };
  struct Offsets {
    size_t local, gathered, sums, f16, f32;
  };
  std::vector<Offsets> off;
  const bool gather = mode_ == ExchangeMode::kAllgather2 && num_processes_ > 1;
  const bool sums = mode_ == ExchangeMode::kAllreduce8;
  const int64_t T = codec_.policy().num_ternary();
  const size_t local_scalers = reserve(4 * static_cast<size_t>(local_ * T));
  const size_t shared_scalers = reserve(4 * static_cast<size_t>(T));
  const size_t zero_codes = reserve(4 * static_cast<size_t>(T));
  for (const Bucket& b : buckets_) {
    const size_t pb = static_cast<size_t>(b.layout.packed_bytes());
    Offsets o{};
    o.local = reserve(static_cast<size_t>(local_) * pb);
    o.gathered = gather ? reserve(static_cast<size_t>(num_workers_) * pb) : 0;
    o.sums = sums ? reserve(4 * pb) : 0;
    // Alone, fp16/fp32 tensors are averaged in place (GradientCodec::average_local): no send buffers.
    o.f16 = processes_ ? reserve(2 * static_cast<size_t>(b.layout.f16_elements())) : 0;
    o.f32 = processes_ ? reserve(4 * static_cast<size_t>(b.layout.f32_elements())) : 0;
    off.push_back(o);
  }
  storage_ = Buffer(be_.allocator(), std::max<size_t>(total, kAlign));
  char* base = static_cast<char*>(storage_.data());
  const Device dev = be_.device();
  be_.zero(Tensor(base, Shape{static_cast<int64_t>(storage_.bytes())}, DType::kU8, dev));  // first touch now
  auto view = [&](size_t at, int64_t n, DType t) { return Tensor(base + at, Shape{n}, t, dev); };
  local_scalers_ = view(local_scalers, local_ * T, DType::kF32);
  for (int w = 0; w < local_; ++w) local_scaler_rows_.push_back(local_scalers_.slice0(w * T, (w + 1) * T));
  shared_scalers_ = view(shared_scalers, T, DType::kF32);
  zero_codes_ = view(zero_codes, T, DType::kI32);
  for (size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = buckets_[i];
    const int64_t pb = b.layout.packed_bytes();
    b.local_codes = view(off[i].local, local_ * pb, DType::kU8);
    if (gather) b.gathered = view(off[i].gathered, num_workers_ * pb, DType::kU8);
    if (sums) b.code_sums = view(off[i].sums, 4 * pb, DType::kI8);
    if (processes_) {
      b.f16 = view(off[i].f16, b.layout.f16_elements(), DType::kF16);
      b.f32 = view(off[i].f32, b.layout.f32_elements(), DType::kF32);
    }
  }
}

template <typename Fn>
void GradientExchange::timed(Phase phase, const char* name, int64_t arg, Fn&& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  const auto t1 = std::chrono::steady_clock::now();
  times_.add(phase, std::chrono::duration<double>(t1 - t0).count());
  if (timeline_ && timeline_->recording()) timeline_->record(exchange_track_, name, t0, t1, arg);
}

// A collective called on this thread: blocked for as long as it is in flight.
template <typename Fn>
void GradientExchange::blocking_collective(Bucket& b, const char* name, Fn&& fn) {
  if (!processes_) return;
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  const auto t1 = std::chrono::steady_clock::now();
  const double secs = std::chrono::duration<double>(t1 - t0).count();
  times_.add(Phase::kCommBlocked, secs);
  times_.add(Phase::kCommInFlight, secs);
  if (timeline_ && timeline_->recording()) timeline_->record(exchange_track_, name, t0, t1, &b - buckets_.data());
}

// ---- stages -----------------------------------------------------------------------------------------------
void GradientExchange::compute_scalers(Bucket& b) {
  if (b.layout.num_scalers() > 0) {
    timed(Phase::kScalers, "scalers", &b - buckets_.data(), [&] {
      for (int w = 0; w < local_; ++w) codec_.local_scalers(be_, grads_[w], b.range, local_scaler_rows_[w]);
      // The max over local workers; a non-finite scaler counts as +inf so the MAX carries it to every worker and
      // all of them stop with the same error (none is left waiting in the next collective).
      codec_.max_local_scalers(be_, local_scaler_rows_, b.range, shared_scalers_);
    });
  }
  b.stage = Stage::kScalersReady;
}

void GradientExchange::share_scalers(Bucket& b) {
  const RangeLayout& l = b.layout;
  if (processes_ && l.num_scalers() > 0)
    processes_->allreduce(shared_scalers_.slice0(l.scaler_begin, l.scaler_end).raw(), l.num_scalers(), DType::kF32,
                          ReduceOp::kMax, be_.device());
}

void GradientExchange::encode(Bucket& b) {
  const RangeLayout& l = b.layout;
  const int64_t index = &b - buckets_.data();
  timed(Phase::kEncode, "encode", index, [&] {
    if (l.packed_bytes() > 0) {
      if (on_host_) codec_.check_scalers(static_cast<const float*>(shared_scalers_.raw()), b.range, step_);
      const int64_t pb = l.packed_bytes();
      for (int w = 0; w < local_; ++w)
        codec_.encode_ternary(be_, grads_[w], b.range, shared_scalers_, step_,
                              static_cast<uint32_t>(process_rank_ * local_ + w),
                              b.local_codes.slice0(w * pb, (w + 1) * pb), w == 0 ? zero_codes_ : Tensor());
      if (mode_ == ExchangeMode::kAllreduce8) codec_.sum_codes(be_, b.local_codes, pb, local_, b.range, b.code_sums);
    }
    // Alone, the fp16/fp32 tensors are averaged in place by decode(): nothing to send.
    if (processes_ && l.f16_elements() > 0) codec_.encode_f16(be_, grad_ptrs_, b.range, b.f16);
    if (processes_ && l.f32_elements() > 0) codec_.encode_f32(be_, grad_ptrs_, b.range, b.f32);
  });
  b.stage = Stage::kEncoded;
}

void GradientExchange::exchange_data(Bucket& b) {
  if (!processes_) return;
  const RangeLayout& l = b.layout;
  const Device dev = be_.device();
  if (l.packed_bytes() > 0) {
    if (mode_ == ExchangeMode::kAllgather2)
      processes_->allgather(b.local_codes.raw(), b.gathered.raw(), static_cast<size_t>(local_) * l.packed_bytes(), dev);
    else
      processes_->allreduce(b.code_sums.raw(), 4 * l.packed_bytes(), DType::kI8, ReduceOp::kSum, dev);
  }
  if (l.f16_elements() > 0) processes_->allreduce(b.f16.raw(), l.f16_elements(), DType::kF16, ReduceOp::kSum, dev);
  if (l.f32_elements() > 0) processes_->allreduce(b.f32.raw(), l.f32_elements(), DType::kF32, ReduceOp::kSum, dev);
}

void GradientExchange::decode(Bucket& b) {
  const RangeLayout& l = b.layout;
  timed(Phase::kDecode, "decode", &b - buckets_.data(), [&] {
    const std::vector<Tensor>& out = grads_[targets_[0]];
    if (l.packed_bytes() > 0) {
      if (mode_ == ExchangeMode::kAllgather2)
        codec_.decode_ternary_gathered(be_, processes_ ? b.gathered : b.local_codes, l.packed_bytes(), num_workers_,
                                       b.range, shared_scalers_, out);
      else
        codec_.decode_ternary_sums(be_, b.code_sums, num_workers_, b.range, shared_scalers_, out);
    }
    if (!processes_) {
      codec_.average_local(be_, grad_ptrs_, b.range, out);
    } else {
      if (l.f16_elements() > 0) codec_.decode_f16_sum(be_, b.f16, num_workers_, b.range, out);
      if (l.f32_elements() > 0) codec_.decode_f32_sum(be_, b.f32, num_workers_, b.range, out);
    }
    for (size_t k = 1; k < targets_.size(); ++k)
      for (int i = b.range.begin; i < b.range.end; ++i) be_.copy(grads_[targets_[k]][i], out[i]);
  });
  b.stage = Stage::kDecoded;
}

const std::vector<float>& GradientExchange::shared_scalers() {
  const int64_t T = codec_.policy().num_ternary();
  if (T > 0) be_.copy(Tensor(host_scalers_.data(), Shape{T}, DType::kF32, Device::cpu()), shared_scalers_);
  return host_scalers_;
}

const std::vector<int64_t>& GradientExchange::zero_codes() {
  const int64_t T = codec_.policy().num_ternary();
  std::vector<int32_t> z(static_cast<size_t>(T));
  if (T > 0) be_.copy(Tensor(z.data(), Shape{T}, DType::kI32, Device::cpu()), zero_codes_);
  for (int64_t k = 0; k < T; ++k) host_zero_codes_[k] = z[k];
  return host_zero_codes_;
}

// ---- the step ----------------------------------------------------------------------------------------------
void GradientExchange::begin(uint32_t step) {
  TG_CHECK(!in_step_, "gradient exchange: begin() of step {} while step {} is still in progress", step, step_);
  in_step_ = true;
  step_ = step;
  ready_from_ = codec_.policy().num_tensors();
  next_post_ = 0;
  for (Bucket& b : buckets_) b.stage = Stage::kWaiting;
  times_.clear();
  wire_before_ = processes_ ? processes_->stats().moved_bytes : 0;
}

void GradientExchange::tensors_ready(int first) {
  TG_CHECK(in_step_, "gradient exchange: tensors_ready() outside a step");
  TG_CHECK(first >= 0 && first <= codec_.policy().num_tensors(), "gradient exchange: tensor {} outside [0, {}]", first,
           codec_.policy().num_tensors());
  ready_from_ = std::min(ready_from_, first);
  for (Bucket& b : buckets_)
    if (b.stage == Stage::kWaiting && b.range.begin >= ready_from_) compute_scalers(b);
  if (comm_thread_) post_next();
}

void GradientExchange::run_share_scalers(void* self, int64_t bucket) {
  auto* ex = static_cast<GradientExchange*>(self);
  ex->share_scalers(ex->buckets_[bucket]);
}

void GradientExchange::run_exchange_data(void* self, int64_t bucket) {
  auto* ex = static_cast<GradientExchange*>(self);
  ex->exchange_data(ex->buckets_[bucket]);
}

// The fixed order of collectives: scalers(0), data(0), scalers(1), data(1), ... (a bucket without ternary
// tensors has no scaler collective). A collective is posted only when all before it are.
void GradientExchange::post_next() {
  const int total = 2 * num_buckets();
  while (next_post_ < total) {
    Bucket& b = buckets_[next_post_ / 2];
    if (next_post_ % 2 == 0) {
      if (b.stage != Stage::kScalersReady) return;
      if (b.layout.num_scalers() == 0) {
        b.stage = Stage::kScalersShared;
      } else {
        b.ticket = comm_thread_->post({&run_share_scalers, this, next_post_ / 2});
        b.stage = Stage::kScalersPosted;
      }
    } else {
      if (b.stage != Stage::kEncoded) return;
      b.ticket = comm_thread_->post({&run_exchange_data, this, next_post_ / 2});
      b.stage = Stage::kDataPosted;
    }
    ++next_post_;
  }
}

void GradientExchange::collect(Bucket& b) {
  const auto begin = comm_thread_->begin_time(b.ticket), end = comm_thread_->end_time(b.ticket);
  times_.add(Phase::kCommInFlight, std::chrono::duration<double>(end - begin).count());
  const bool scalers = b.stage == Stage::kScalersPosted;
  if (timeline_ && timeline_->recording())
    timeline_->record(comm_track_, scalers ? "share scalers" : "exchange codes", begin, end, &b - buckets_.data());
  b.stage = scalers ? Stage::kScalersShared : Stage::kDataDone;
}

bool GradientExchange::advance(bool block) {
  bool moved = false;
  Bucket* oldest = nullptr;  // the first bucket with a posted job: jobs finish in post order
  for (Bucket& b : buckets_) {
    if (b.stage == Stage::kScalersPosted || b.stage == Stage::kDataPosted) {
      if (!oldest) oldest = &b;
      if (comm_thread_->done(b.ticket)) {
        collect(b);
        moved = true;
      }
    }
    if (b.stage == Stage::kScalersShared) {
      encode(b);
      post_next();
      moved = true;
    }
    if (b.stage == Stage::kDataDone) {
      decode(b);
      moved = true;
    }
  }
  if (!moved && block && oldest) {
    const auto t0 = std::chrono::steady_clock::now();
    comm_thread_->wait(oldest->ticket);
    const auto t1 = std::chrono::steady_clock::now();
    times_.add(Phase::kCommBlocked, std::chrono::duration<double>(t1 - t0).count());
    if (timeline_ && timeline_->recording())
      timeline_->record(exchange_track_, "wait", t0, t1, oldest - buckets_.data());
    moved = true;
  }
  return moved;
}

void GradientExchange::progress() {
  TG_CHECK(in_step_, "gradient exchange: progress() outside a step");
  if (comm_thread_) advance(false);
}

ExchangeStats GradientExchange::finish() {
  TG_CHECK(in_step_, "gradient exchange: finish() outside a step");
  if (ready_from_ > 0) tensors_ready(0);  // whatever the caller did not report is final now
  if (comm_thread_) {
    while (std::any_of(buckets_.begin(), buckets_.end(), [](const Bucket& b) { return b.stage != Stage::kDecoded; }))
      TG_CHECK(advance(true), "gradient exchange: no bucket can move at step {} (internal error)", step_);
  } else {
    for (Bucket& b : buckets_) {
      blocking_collective(b, "share scalers", [&] { share_scalers(b); });
      encode(b);
      blocking_collective(b, "exchange codes", [&] { exchange_data(b); });
      decode(b);
    }
  }
  in_step_ = false;
  ExchangeStats st = step_stats_;
  if (processes_) st.process_wire_bytes = processes_->stats().moved_bytes - wire_before_;
  return st;
}

ExchangeStats GradientExchange::run(uint32_t step) {
  begin(step);
  tensors_ready(0);
  return finish();
}

}  // namespace tg
