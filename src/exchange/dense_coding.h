// DenseCoding: the fp16 and fp32 tensors of a range of policy tensors (a bucket) over the policy's fused buffers,
// through the Backend's codec ops only (the same code on the CPU and on CUDA, no gradient leaves its device): the
// local workers' sums into the range's piece of a fused buffer (encode), the sum over N workers divided by N into
// the gradients (decode), and alone the local workers' average in place. DensePart runs it for every scheme.
//
// Buffers hold only the range (`f16`/`f32` start at its first element of that coding), seen flat; gradients are
// f32 tensors on the backend's device, one per policy tensor (CompressionPolicy::check_grads). Sums are formed in
// worker order. Nothing synchronizes or allocates.
#pragma once

#include <vector>

#include "terngrad/backend/backend.h"
#include "terngrad/compress/compression_policy.h"

namespace tg {

class DenseCoding {
 public:
  explicit DenseCoding(const CompressionPolicy& policy) : policy_(policy) {}
  // Sum over `workers` of their fp16-rounded values, in fp32, rounded to fp16 once -> f16.
  void encode_f16(Backend& be, const std::vector<const std::vector<Tensor>*>& workers, TensorRange r,
                  const Tensor& f16) const;
  // Sum over `workers` of their fp32 values -> f32.
  void encode_f32(Backend& be, const std::vector<const std::vector<Tensor>*>& workers, TensorRange r,
                  const Tensor& f32) const;
  // One process alone: the fp16 and fp32 tensors of r in `out` become the average over `workers` directly, the
  // same bits as the encodes followed by the decodes (out may be one of the workers' gradients: each element is
  // read before it is written). The ternary tensors of r are not touched.
  void average_local(Backend& be, const std::vector<const std::vector<Tensor>*>& workers, TensorRange r,
                     const std::vector<Tensor>& out) const;
  // The sum over num_workers (encode's buffers after an all-reduce SUM) divided by num_workers -> grads.
  void decode_f16_sum(Backend& be, const Tensor& sum, int num_workers, TensorRange r,
                      const std::vector<Tensor>& grads) const;
  void decode_f32_sum(Backend& be, const Tensor& sum, int num_workers, TensorRange r,
                      const std::vector<Tensor>& grads) const;

 private:
  // fn(i, piece) for each tensor i of r coded `coding` (fp16 or fp32), piece its elements in the range's buffer.
  template <class Fn>
  void for_each(TensorRange r, GradCoding coding, const Tensor& buf, const char* what, Fn&& fn) const;
  const CompressionPolicy& policy_;
};

}  // namespace tg
