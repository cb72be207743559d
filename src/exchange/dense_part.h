// DensePart: the fp16 and fp32 tensors of a policy (everything under --grad_bits 32 and 16, and the tensors a
// ternary policy keeps uncompressed) as every scheme exchanges them over a flat group: the local workers' sum
// in the bucket's fused buffer (encode), an all-reduce SUM (exchange), the sum over N workers divided by N
// (decode). Alone (no group) decode averages the local workers' gradients in place and nothing else runs.
// Sums are formed in worker order inside the replica, then in the group's order: with several workers per
// replica their bits follow that grouping, as for any all-reduce.
#pragma once

#include <vector>

#include "src/exchange/dense_coding.h"
#include "src/exchange/exchange_arena.h"
#include "terngrad/exchange/gradient_scheme.h"

namespace tg {

class DensePart {
 public:
  // Buffers of every bucket, on the context's device (allocated and zeroed once).
  DensePart(SchemeContext& ctx, const std::vector<TensorRange>& buckets);
  bool empty(int bucket) const;                    // the bucket has no fp16/fp32 tensor
  void encode(int bucket);                         // local sums into the bucket's buffers (with a group)
  void exchange(Communicator* group, int bucket);  // all-reduce SUM of the buffers
  void decode(int bucket);                         // the average into the first target's gradients
  // The byte model's share: adds the fused buffers' all-reduces over N workers to `s`.
  void add_byte_model(ExchangeStats& s) const;
  // The same step as fp32 (4 bytes an element) and what a ring all-reduce of it moves per worker, into `s`.
  static void set_fp32_equivalent(const SchemeContext& ctx, ExchangeStats& s);

 private:
  SchemeContext& ctx_;
  DenseCoding coding_;
  std::vector<TensorRange> ranges_;
  ExchangeArena arena_;
  std::vector<Tensor> f16_, f32_;  // per bucket; undefined alone
};

}  // namespace tg
