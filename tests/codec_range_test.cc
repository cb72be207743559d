// The schemes' range codings (TernaryCoding, DenseCoding: the device form a scheme runs over a range of tensors)
// against the same plain definitions as the ops (common/codec_test_support.h) written out per tensor in the
// policy's fused layout, bit for bit, for LeNet's policies (ternary + fp32, fp16 + fp32) and one of odd sizes, three
// workers and several ranges: on the CPU backend, and on the CUDA backend (SKIPPED without a CUDA build or device).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/codec_test_support.h"
#include "src/exchange/dense_coding.h"
#include "src/exchange/schemes/terngrad/ternary_coding.h"
#include "terngrad/backend/backend.h"
#include "terngrad/compress/compression_policy.h"
#include "terngrad/core/error.h"
#include "terngrad/math/ternary_math.h"
#include "terngrad/models/registry.h"
#include "terngrad/nn/net.h"

namespace tg {
namespace {

using namespace codec_test;  // NOLINT(build/namespaces): the codec tests' shared helpers

// ---- TernaryCoding and DenseCoding (the schemes' range codings) against the definitions ------------------------
std::vector<ParamInfo> lenet_params() {
  Net net;
  build_model("lenet", ModelConfig{}, net);
  net.setup(cpu(), 1);
  std::vector<ParamInfo> infos;
  for (const auto& p : net.param_specs()) infos.push_back({p.name, p.shape.numel()});
  return infos;
}

// Everything one range of one step produces, read back to the host.
struct RangeResults {
  std::vector<float> scalers;     // [worker][num_ternary]
  std::vector<uint8_t> codes;     // workers' packed blocks
  std::vector<int64_t> zeros;     // worker 0's zero codes (num_ternary)
  std::vector<float> max_shared;  // (num_ternary) the max over the workers' scalers of the range
  std::vector<int8_t> code_sums;  //
  std::vector<half_bits> f16;     //
  std::vector<float> f32;         //
  std::vector<std::vector<float>> gathered_out, sums_out, average_out;  // tensors of the range
};

struct Step {
  const CompressionPolicy& policy;
  uint64_t seed = 4242;
  std::vector<std::vector<std::vector<float>>> grads;  // [worker][tensor][element]
  std::vector<float> shared;                           // shared scalers (num_scalers), from the definition
  uint32_t step = 17;
};

std::vector<std::vector<float>> range_tensors(const Step& st, TensorRange r, float fill) {
  std::vector<std::vector<float>> out;
  for (int i = r.begin; i < r.end; ++i) out.emplace_back(st.policy.tensors()[i].numel, fill);
  return out;
}

// The range's results written from the plain definitions above, tensor by tensor, in the fused layout the policy
// documents (ternary codes back to back from the range's first packed byte, fp16/fp32 likewise; scaler vectors and
// zero counts full-size, untouched outside the range).
RangeResults reference_form(const Step& st, TensorRange r) {
  const CompressionPolicy& p = st.policy;
  const RangeLayout l = p.layout(r);
  const int W = static_cast<int>(st.grads.size()), S = p.num_scalers();
  const float clip = p.flags().clip_factor;
  RangeResults res;
  res.scalers.assign(static_cast<size_t>(W) * S, 0.f);
  res.max_shared.assign(S, 0.f);
  res.codes.assign(static_cast<size_t>(W) * l.packed_bytes(), 0);
  res.zeros.assign(p.num_ternary(), -1);
  res.f16.assign(l.f16_elements(), half_bits{0});
  res.f32.assign(l.f32_elements(), 0.f);
  res.gathered_out = range_tensors(st, r, -7.f);
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = p.tensors()[i];
    const size_t n = static_cast<size_t>(t.numel);
    std::vector<float>& out = res.gathered_out[i - r.begin];
    std::vector<float> average = st.grads[0][i];  // average_local: the ternary tensors keep worker 0's values
    if (t.coding == GradCoding::kTernary) {
      EXPECT_EQ(t.num_scalers, 1) << "the reference takes one scaler per tensor";
      std::vector<std::vector<float>> column;
      for (int w = 0; w < W; ++w) {
        res.scalers[static_cast<size_t>(w) * S + t.scaler_index] = ref_scaler(st.grads[w][i], clip);
        column.push_back({res.scalers[static_cast<size_t>(w) * S + t.scaler_index]});
      }
      res.max_shared[t.scaler_index] = ref_max_scaler(column, 0);
      const float s = st.shared[t.scaler_index];
      const int64_t at = t.offset - l.packed_begin;
      for (int w = 0; w < W; ++w) {
        int64_t zeros = 0;
        const std::vector<uint8_t> codes = ref_encode(st.grads[w][i], s, philox_key(st.seed, static_cast<uint32_t>(w)),
                                                      st.step, static_cast<uint32_t>(i), &zeros);
        std::copy(codes.begin(), codes.end(), res.codes.begin() + w * l.packed_bytes() + at);
        if (w == 0) res.zeros[t.ternary_index] = zeros;
      }
      for (int64_t e = 0; e < t.numel; ++e) {
        const int sum = ref_code_sum(res.codes, l.packed_bytes(), W, 4 * at + e);
        out[e] = ternary_decode_value(s, sum, W);
      }
    } else if (t.coding == GradCoding::kF16) {
      for (size_t e = 0; e < n; ++e) {
        float acc = 0.f;
        for (int w = 0; w < W; ++w) acc += half_to_float(float_to_half(st.grads[w][i][e]));
        const half_bits h = float_to_half(acc);
        res.f16[t.offset - l.f16_begin + e] = h;
        out[e] = average[e] = half_to_float(h) / static_cast<float>(W);
      }
    } else {
      for (size_t e = 0; e < n; ++e) {
        float sum = st.grads[0][i][e];
        for (int w = 1; w < W; ++w) sum += st.grads[w][i][e];
        res.f32[t.offset - l.f32_begin + e] = sum;
        out[e] = average[e] = sum / static_cast<float>(W);
      }
    }
    res.average_out.push_back(average);
  }
  res.sums_out = res.gathered_out;  // both decoders give the same average
  res.code_sums.assign(4 * l.packed_bytes(), 0);
  for (int64_t k = 0; k < 4 * l.packed_bytes(); ++k)
    res.code_sums[k] = static_cast<int8_t>(ref_code_sum(res.codes, l.packed_bytes(), W, k));
  return res;
}

// The same through `be`'s codec ops, on its device.
RangeResults device_form(Backend& be, Step& st, TensorRange r) {
  const CompressionPolicy& p = st.policy;
  const TernaryCoding c(p, st.seed);
  const DenseCoding dense(p);
  const RangeLayout l = p.layout(r);
  const int W = static_cast<int>(st.grads.size()), T = p.num_ternary(), N = p.num_tensors();
  std::vector<std::vector<Mem>> mem(W + 1);  // workers' gradients, and worker 0's copy for average_local
  std::vector<std::vector<Tensor>> views(W + 1);
  for (int w = 0; w <= W; ++w)
    for (int i = 0; i < N; ++i) {
      const std::vector<float>& g = st.grads[w == W ? 0 : w][i];
      mem[w].emplace_back(be, static_cast<int64_t>(g.size()), DType::kF32);
      mem[w].back().upload(g);
    }
  for (int w = 0; w <= W; ++w)
    for (auto& m : mem[w]) views[w].push_back(m.t());
  std::vector<const std::vector<Tensor>*> workers;
  for (int w = 0; w < W; ++w) workers.push_back(&views[w]);
  for (int w = 0; w <= W; ++w) p.check_grads(views[w], be.device());

  RangeResults res;
  Mem shared(be, T, DType::kF32);
  shared.upload(st.shared);
  std::vector<Mem> worker_scalers;
  std::vector<Tensor> ws;
  for (int w = 0; w < W; ++w) worker_scalers.emplace_back(be, T, DType::kF32, 0);
  for (int w = 0; w < W; ++w) {
    ws.push_back(worker_scalers[w].t());
    c.local_scalers(be, views[w], r, ws[w]);
    const std::vector<float> v = worker_scalers[w].download<float>();
    res.scalers.insert(res.scalers.end(), v.begin(), v.end());
    EXPECT_TRUE(worker_scalers[w].guards_intact());
  }
  {
    Mem m(be, T, DType::kF32, 0);
    c.max_local_scalers(be, ws, r, m.t());
    res.max_shared = m.download<float>();
    EXPECT_TRUE(m.guards_intact());
  }
  Mem codes(be, W * l.packed_bytes(), DType::kU8), zeros(be, T, DType::kI32);
  {  // zero codes outside the range stay as they were (-1)
    std::vector<int32_t> init(T, -1);
    zeros.upload(init);
  }
  for (int w = 0; w < W; ++w)
    c.encode_ternary(be, views[w], r, shared.t(), st.step, static_cast<uint32_t>(w),
                     codes.t().slice0(w * l.packed_bytes(), (w + 1) * l.packed_bytes()), w == 0 ? zeros.t() : Tensor());
  res.codes = codes.download<uint8_t>();
  for (int32_t z : zeros.download<int32_t>()) res.zeros.push_back(z);
  Mem sums(be, 4 * l.packed_bytes(), DType::kI8), f16(be, l.f16_elements(), DType::kF16),
      f32(be, l.f32_elements(), DType::kF32);
  c.sum_codes(be, codes.t(), l.packed_bytes(), W, r, sums.t());
  dense.encode_f16(be, workers, r, f16.t());
  dense.encode_f32(be, workers, r, f32.t());
  res.code_sums = sums.download<int8_t>();
  res.f16 = f16.download<half_bits>();
  res.f32 = f32.download<float>();
  auto decode_into = [&](std::vector<std::vector<float>>& out, bool gathered) {
    std::vector<Mem> m;
    std::vector<Tensor> t(N);
    for (int i = r.begin; i < r.end; ++i) {
      m.emplace_back(be, p.tensors()[i].numel, DType::kF32);
      m.back().upload(std::vector<float>(p.tensors()[i].numel, -7.f));
    }
    for (int i = r.begin; i < r.end; ++i) t[i] = m[i - r.begin].t();
    if (gathered)
      c.decode_ternary_gathered(be, codes.t(), l.packed_bytes(), W, r, shared.t(), t);
    else
      c.decode_ternary_sums(be, sums.t(), W, r, shared.t(), t);
    dense.decode_f16_sum(be, f16.t(), W, r, t);
    dense.decode_f32_sum(be, f32.t(), W, r, t);
    for (auto& x : m) {
      out.push_back(x.download<float>());
      EXPECT_TRUE(x.guards_intact());
    }
  };
  decode_into(res.gathered_out, true);
  decode_into(res.sums_out, false);
  std::vector<const std::vector<Tensor>*> aliased = workers;
  aliased[0] = &views[W];
  dense.average_local(be, aliased, r, views[W]);
  for (int i = r.begin; i < r.end; ++i) res.average_out.push_back(mem[W][i].download<float>());
  for (Mem* m : {&codes, &zeros, &sums, &f16, &f32}) EXPECT_TRUE(m->guards_intact());
  return res;
}

void expect_same(const RangeResults& a, const RangeResults& b, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(a.scalers.size(), b.scalers.size());
  for (size_t i = 0; i < a.scalers.size(); ++i) ASSERT_TRUE(same_float(a.scalers[i], b.scalers[i])) << "scaler " << i;
  ASSERT_EQ(a.max_shared.size(), b.max_shared.size());
  for (size_t i = 0; i < a.max_shared.size(); ++i)
    ASSERT_TRUE(same_float(a.max_shared[i], b.max_shared[i])) << "max scaler " << i;
  EXPECT_EQ(a.codes, b.codes);
  EXPECT_EQ(a.zeros, b.zeros);
  EXPECT_EQ(a.code_sums, b.code_sums);
  ASSERT_EQ(a.f16.size(), b.f16.size());
  for (size_t i = 0; i < a.f16.size(); ++i) ASSERT_TRUE(same_half(a.f16[i], b.f16[i])) << "f16 " << i;
  ASSERT_EQ(a.f32.size(), b.f32.size());
  for (size_t i = 0; i < a.f32.size(); ++i) ASSERT_TRUE(same_float(a.f32[i], b.f32[i])) << "f32 " << i;
  for (auto field : {&RangeResults::gathered_out, &RangeResults::sums_out, &RangeResults::average_out}) {
    const auto &x = a.*field, &y = b.*field;
    ASSERT_EQ(x.size(), y.size());
    for (size_t t = 0; t < x.size(); ++t) {
      ASSERT_EQ(x[t].size(), y[t].size());
      for (size_t i = 0; i < x[t].size(); ++i)
        ASSERT_TRUE(same_float(x[t][i], y[t][i]))
            << "tensor " << t << " element " << i << ": " << x[t][i] << " vs " << y[t][i];
    }
  }
}

// Three workers' gradients for `policy` and the shared scalers of the definition (the max of their scalers).
Step make_step(const CompressionPolicy& policy) {
  Step st{policy, 4242, {}, {}};
  for (int w = 0; w < 3; ++w) {
    std::vector<std::vector<float>> g;
    for (const auto& t : policy.tensors()) g.push_back(normal(t.numel, 300 + 10 * w + g.size(), 0.01f));
    st.grads.push_back(std::move(g));
  }
  st.shared.assign(policy.num_scalers(), 0.f);
  for (const TensorCodingPlan& t : policy.tensors())
    if (t.coding == GradCoding::kTernary)
      for (int w = 0; w < 3; ++w)
        st.shared[t.scaler_index] =
            std::max(st.shared[t.scaler_index], ref_scaler(st.grads[w][&t - policy.tensors().data()], 2.5f));
  return st;
}

std::vector<TensorRange> ranges_of(const CompressionPolicy& p) {
  const int n = p.num_tensors();
  std::vector<TensorRange> r = {p.all(), {n - 2, n}, {n - 1, n - 1}};
  if (n > 4) r.insert(r.end(), {{0, 3}, {3, n - 2}, {4, 4}});
  return r;
}

// The device form on `be` against the definitions (the CPU: bit for bit), for LeNet's policies (ternary + fp32,
// fp16 + fp32) and one of odd sizes (13, 8 and 1 elements: codes ending inside a byte, a one-element tensor).
void compare_with_reference(Backend& be) {
  const std::vector<std::pair<std::string, std::vector<ParamInfo>>> nets = {
      {"lenet", lenet_params()},
      {"odd sizes", {{"a", 13}, {"b", 8}, {"c", 1}, {"logits/weights", 6}, {"logits/biases", 3}}}};
  for (const auto& [net, params] : nets)
    for (int bits : {1, 16}) {
      CompressionFlags f;
      f.grad_bits = bits;
      f.clip_factor = 2.5f;
      f.size_to_binarize = net == "lenet" ? 100 : 1;  // LeNet's biases stay fp32
      const CompressionPolicy policy(f, params);
      Step st = make_step(policy);
      for (TensorRange r : ranges_of(policy)) {
        const RangeResults want = reference_form(st, r);
        const RangeResults got = device_form(be, st, r);
        expect_same(want, got,
                    net + " grad_bits " + std::to_string(bits) + " range [" + std::to_string(r.begin) + ", " +
                        std::to_string(r.end) + ") on " + be.name());
      }
    }
}

TEST(CodecDeviceForm, CpuBackendGivesTheDefinitionsBits) { compare_with_reference(cpu()); }

TEST(CodecDeviceForm, GradientsOnAnotherDeviceAreRejected) {
  const CompressionPolicy policy(CompressionFlags{}, {{"w", 4}});
  std::vector<float> g(4);
  const std::vector<Tensor> grads = {Tensor(g.data(), Shape{4}, DType::kF32, Device::cpu())};
  EXPECT_NO_THROW(policy.check_grads(grads, Device::cpu()));
  EXPECT_THROW(policy.check_grads(grads, Device::cuda(0)), Error);
}

TEST(CodecDeviceForm, CudaBackendGivesTheDefinitionsBits) {
  TG_REQUIRE_CUDA();
  compare_with_reference(*cuda().be);
}

}  // namespace
}  // namespace tg
