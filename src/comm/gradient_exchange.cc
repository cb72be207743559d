// GradientExchange: scalers, codes and the fp32/fp16 remainder of one step over a Communicator.
#include "terngrad/comm/gradient_exchange.h"

#include <cmath>
#include <limits>

#include "terngrad/core/error.h"

namespace tg {

ExchangeMode parse_exchange_mode(const std::string& s) {
  if (s == "auto") return ExchangeMode::Auto;
  if (s == "allgather2") return ExchangeMode::Allgather2;
  if (s == "allreduce8") return ExchangeMode::Allreduce8;
  TG_THROW("--exchange '{}' is not supported; accepted values: auto, allgather2, allreduce8", s);
}

const char* exchange_mode_name(ExchangeMode m) {
  switch (m) {
    case ExchangeMode::Auto:
      return "auto";
    case ExchangeMode::Allgather2:
      return "allgather2";
    case ExchangeMode::Allreduce8:
      return "allreduce8";
  }
  return "?";
}

ExchangeMode resolve_exchange_mode(ExchangeMode m, int num_workers) {
  if (m != ExchangeMode::Auto) return m;
  return num_workers < 8 ? ExchangeMode::Allgather2 : ExchangeMode::Allreduce8;
}

GradientExchange::GradientExchange(const CompressionPolicy& policy, Communicator& comm, ExchangeMode mode,
                                   uint64_t seed, ThreadPool* pool)
    : codec_(policy, seed, pool), comm_(comm), mode_(resolve_exchange_mode(mode, comm.size())) {
  if (mode_ == ExchangeMode::Allreduce8 && policy.num_ternary() > 0)
    TG_CHECK(comm.size() <= 127,
             "--exchange allreduce8 sums int8 codes, exact up to 127 workers; {} workers need allgather2", comm.size());
  codec_.allocate(encoded_);
}

ExchangeStats GradientExchange::run(const std::vector<Tensor>& grads, uint32_t step) {
  const CompressionPolicy& policy = codec_.policy();
  const int n = comm_.size();
  const CommStats before = comm_.stats();

  if (policy.num_ternary() > 0) {
    // Scaler sharing. A non-finite local scaler becomes +inf so the MAX carries it to every worker and
    // all of them stop with the same error (none is left waiting in the next collective).
    std::vector<float> scalers = codec_.local_scalers(grads);
    for (float& s : scalers)
      if (!std::isfinite(s)) s = std::numeric_limits<float>::infinity();
    comm_.allreduce(scalers.data(), static_cast<int64_t>(scalers.size()), DType::F32, ReduceOp::Max);
    codec_.encode(grads, scalers, step, static_cast<uint32_t>(comm_.rank()), encoded_);
    const int64_t packed = policy.packed_bytes();
    if (mode_ == ExchangeMode::Allgather2) {
      gathered_.resize(static_cast<size_t>(packed) * n);
      comm_.allgather(encoded_.packed.data(), gathered_.data(), static_cast<size_t>(packed));
      codec_.decode_ternary_gathered(gathered_.data(), encoded_.scalers, n, grads);
    } else {
      code_sums_.resize(static_cast<size_t>(4 * packed));
      codec_.unpack_codes(encoded_.packed.data(), code_sums_.data());
      comm_.allreduce(code_sums_.data(), 4 * packed, DType::I8, ReduceOp::Sum);
      codec_.decode_ternary_sums(code_sums_.data(), encoded_.scalers, n, grads);
    }
  } else {
    codec_.encode(grads, {}, step, static_cast<uint32_t>(comm_.rank()), encoded_);
  }
  if (policy.f16_elements() > 0) {
    comm_.allreduce(encoded_.f16.data(), policy.f16_elements(), DType::F16, ReduceOp::Sum);
    codec_.decode_f16_sum(encoded_.f16.data(), n, grads);
  }
  if (policy.f32_elements() > 0) {
    comm_.allreduce(encoded_.f32.data(), policy.f32_elements(), DType::F32, ReduceOp::Sum);
    codec_.decode_f32_sum(encoded_.f32.data(), n, grads);
  }

  const CommStats& after = comm_.stats();
  ExchangeStats st;
  st.payload_bytes = after.payload_bytes - before.payload_bytes;
  st.moved_bytes = after.moved_bytes - before.moved_bytes;
  st.fp32_payload_bytes = 4 * static_cast<uint64_t>(policy.total_elements());
  st.fp32_moved_bytes = Communicator::allreduce_moved_bytes(st.fp32_payload_bytes, n);
  return st;
}

}  // namespace tg
