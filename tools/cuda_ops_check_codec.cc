// cuda_ops_check's codec group: the ternary gradient codec's kernels against the CPU loops (src/backend/cpu/
// ternary_codec.cc, linked in: the same bits are the contract, terngrad/math/ternary_math.h) for the same Philox
// keys, and their speed against HBM.
//   - one AlexNet-sized gradient (61,100,840 elements): scaler, encode with its zero count, the int8 code sums of 4
//     workers, the decode of those sums and the decode of the gathered codes, each compared bit for bit; the
//     scaler + encode pass in GB/s (4n + 4n + n/4 bytes: the gradient read twice, the codes written once) against
//     the H200's 4.8 TB/s and against a device-to-device copy measured here (the achievable ceiling);
//   - ResNet-50's parameter tensors (161 tensors, 25.5M elements; many small ones): every tensor's scaler and codes
//     compared, then the whole list timed as per-tensor scaler + encode launches and with the table encode
//     (Backend::ternary_encode_many: one launch per 64 tensors).
#include <memory>

#include "terngrad/backend/ternary_codec.h"
#include "terngrad/math/ternary_math.h"
#include "tools/cuda_ops_check.h"

namespace tg::ops_check {
namespace {

constexpr float kClip = 2.5f;
constexpr uint32_t kStep = 1234;

// A gradient-like tensor: roughly normal values of scale 1e-3 (a sum of uniforms) with one outlier.
std::vector<float> gradient(int64_t n, uint64_t seed) {
  std::vector<float> a = randoms(n, seed), b = randoms(n, seed + 1000);
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) a[i] = 1e-3f * (a[i] + b[i]);
  if (n > 10) a[n / 3] = 0.05f;
  return a;
}

template <typename T>
std::vector<T> download_raw(Backend& be, const Tensor& t) {
  std::vector<T> v(t.bytes() / sizeof(T));
  if (!v.empty())
    be.copy(Tensor(v.data(), Shape{static_cast<int64_t>(t.bytes())}, DType::kU8, Device::cpu()),
            Tensor(t.raw(), Shape{static_cast<int64_t>(t.bytes())}, DType::kU8, t.device()));
  return v;
}

template <typename T>
Stats compare_exact(const std::vector<T>& got, const std::vector<T>& want) {
  Stats st;
  st.checked = static_cast<int64_t>(want.size());
  if (got.size() != want.size()) {
    st.bad = st.checked > 0 ? st.checked : 1;
  } else {
    for (size_t i = 0; i < want.size(); ++i)
      if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) ++st.bad;
  }
  if (st.bad) st.max_rel = 1;
  return st;
}

std::string hbm(double bytes, double ms, double copy_gbs) {
  const double gbs = bytes / ms * 1e-6;
  return fmt::format("  {:.0f} GB/s = {:.0f}% of 4.8 TB/s, {:.0f}% of the measured copy", gbs,
                     100 * gbs * 1e9 / kH200Bandwidth, 100 * gbs / copy_gbs);
}

// GB/s of a device-to-device copy of `bytes` (read + written), median of kTimedRuns.
double copy_ceiling(CudaBackend& be, int64_t bytes) {
  Dev a(be, Shape{bytes}, DType::kU8), b(be, Shape{bytes}, DType::kU8);
  be.zero(a.t);
  const double ms = time_ms(be, [&] { be.copy(b.t, a.t); });
  return 2.0 * static_cast<double>(bytes) / ms * 1e-6;
}

// ResNet-50's parameter tensors: per convolution its weights (k, k, cin, cout) and its batch norm's gamma and beta;
// the logits' weights and biases (1001 classes).
std::vector<int64_t> resnet50_tensors() {
  std::vector<int64_t> sizes;
  auto conv = [&](int64_t k, int64_t cin, int64_t cout) {
    sizes.push_back(k * k * cin * cout);
    sizes.push_back(cout), sizes.push_back(cout);
  };
  conv(7, 3, 64);
  int64_t cin = 64;
  const int blocks[] = {3, 4, 6, 3};
  for (int s = 0; s < 4; ++s) {
    const int64_t w = int64_t{64} << s;
    for (int b = 0; b < blocks[s]; ++b) {
      if (b == 0) conv(1, cin, 4 * w);  // projection shortcut
      conv(1, cin, w), conv(3, w, w), conv(1, w, 4 * w);
      cin = 4 * w;
    }
  }
  sizes.push_back(2048 * 1001), sizes.push_back(1001);
  return sizes;
}

// The full check of one tensor (scaler, encode + zero count, sums of 4 workers, both decodes) against the CPU; the
// scaler + encode timing when `timed`.
void check_tensor(CudaBackend& be, const std::string& name, int64_t n, bool timed, double copy_gbs) {
  const std::string shape = fmt::format("{} elements", n);
  std::vector<float> hg = gradient(n, 81);
  const int W = 4;
  const int64_t nbytes = ternary_packed_bytes(n);
  Dev g(be, Shape{n}), s(be, Shape{1}), packed(be, Shape{W * nbytes}, DType::kU8), zeros(be, Shape{W}, DType::kI32),
      sums(be, Shape{n}, DType::kI8), dec(be, Shape{n}), decg(be, Shape{n});
  upload(be, g.t, hg);
  const float s_cpu = ternary_scaler_cpu(hg.data(), n, kClip);
  guarded("codec scaler", shape, [&] {
    poison(be, s.t);
    be.ternary_scaler(g.t, kClip, s.t);
    const std::vector<float> got = download(be, s.t);
    const double ms = timed ? time_ms(be, [&] { be.ternary_scaler(g.t, kClip, s.t); }) : 0.0;
    report("codec scaler " + name, shape, compare_exact(got, std::vector<float>{s_cpu}), ms, "tg kernel (CPU order)",
           true, true, timed ? hbm(4.0 * n, ms, copy_gbs) : "");
  });
  // Every worker's codes, drawn with its own key, and its zero count.
  std::vector<uint8_t> want_packed(static_cast<size_t>(W * nbytes));
  std::vector<int32_t> want_zeros(W);
  for (int w = 0; w < W; ++w)
    want_zeros[w] = static_cast<int32_t>(
        ternary_encode_cpu(hg.data(), n, s_cpu, philox_key(7, w), kStep, 3, want_packed.data() + w * nbytes));
  auto encode_all = [&] {
    for (int w = 0; w < W; ++w)
      be.ternary_encode(g.t, s.t, philox_key(7, w), kStep, 3, packed.t.slice0(w * nbytes, (w + 1) * nbytes),
                        zeros.t.slice0(w, w + 1));
  };
  guarded("codec encode", shape, [&] {
    poison_any(be, packed.t);
    encode_all();
    Stats st = compare_exact(download_raw<uint8_t>(be, packed.t), want_packed);
    st.merge(compare_exact(download_raw<int32_t>(be, zeros.t), want_zeros));
    double ms = 0, both = 0;
    if (timed) {
      const Tensor one = packed.t.slice0(0, nbytes), z = zeros.t.slice0(0, 1);
      ms = time_ms(be, [&] { be.ternary_encode(g.t, s.t, philox_key(7, 0), kStep, 3, one, z); });
      both = time_ms(be, [&] {
        be.ternary_scaler(g.t, kClip, s.t);
        be.ternary_encode(g.t, s.t, philox_key(7, 0), kStep, 3, one, z);
      });
    }
    report("codec encode+zeros " + name, shape, st, ms, "tg kernel (16-byte loads)", true, true,
           timed ? hbm(4.0 * n + nbytes, ms, copy_gbs) +
                       fmt::format("; scaler+encode {:.3f} ms{}", both, hbm(8.0 * n + nbytes, both, copy_gbs))
                 : "");
  });
  std::vector<int8_t> want_sums(static_cast<size_t>(n));
  ternary_sum_codes_cpu(want_packed.data(), nbytes, W, n, want_sums.data());
  guarded("codec sums", shape, [&] {
    be.copy(packed.t, Tensor(want_packed.data(), packed.t.shape(), DType::kU8, Device::cpu()));
    poison_any(be, sums.t);
    be.ternary_sum_codes(packed.t, nbytes, W, sums.t);
    const double ms = timed ? time_ms(be, [&] { be.ternary_sum_codes(packed.t, nbytes, W, sums.t); }) : 0.0;
    report("codec code sums " + name, fmt::format("{} x {} workers", n, W),
           compare_exact(download_raw<int8_t>(be, sums.t), want_sums), ms, "tg kernel", true, true,
           timed ? hbm(W * static_cast<double>(nbytes) + n, ms, copy_gbs) : "");
  });
  guarded("codec decodes", shape, [&] {
    std::vector<float> want_dec(static_cast<size_t>(n)), want_decg(static_cast<size_t>(n));
    ternary_decode_sums_cpu(want_sums.data(), n, s_cpu, W, want_dec.data());
    ternary_decode_gathered_cpu(want_packed.data(), nbytes, W, n, s_cpu, want_decg.data());
    be.copy(s.t, Tensor(const_cast<float*>(&s_cpu), Shape{1}, DType::kF32, Device::cpu()));
    poison(be, dec.t), poison(be, decg.t);
    be.ternary_decode_sums(sums.t, s.t, W, dec.t);
    be.ternary_decode_gathered(packed.t, nbytes, W, s.t, decg.t);
    Stats st = compare_exact(download(be, dec.t), want_dec);
    st.merge(compare_exact(download(be, decg.t), want_decg));
    const double ms = timed ? time_ms(be, [&] { be.ternary_decode_gathered(packed.t, nbytes, W, s.t, decg.t); }) : 0.0;
    report("codec decodes " + name, fmt::format("{} x {} workers", n, W), st, ms, "tg kernels (sums, gathered)", true,
           true, timed ? "  gathered:" + hbm(W * static_cast<double>(nbytes) + 4.0 * n, ms, copy_gbs) : "");
  });
}

// ResNet-50's list: bits of every tensor's scaler and codes; then the list's scaler + encode timed per tensor and
// with the table encode.
void check_tensor_list(CudaBackend& be, double copy_gbs) {
  const std::vector<int64_t> sizes = resnet50_tensors();
  int64_t total = 0;
  for (int64_t n : sizes) total += n;
  const std::string shape = fmt::format("{} tensors, {} elements", sizes.size(), total);
  std::vector<float> hg = gradient(total, 91);
  std::vector<int64_t> offset(sizes.size() + 1, 0), poffset(sizes.size() + 1, 0);
  for (size_t k = 0; k < sizes.size(); ++k)
    offset[k + 1] = offset[k] + sizes[k], poffset[k + 1] = poffset[k] + ternary_packed_bytes(sizes[k]);
  const int64_t T = static_cast<int64_t>(sizes.size());
  Dev g(be, Shape{total}), s(be, Shape{T}), packed(be, Shape{poffset[T]}, DType::kU8), zeros(be, Shape{T}, DType::kI32);
  upload(be, g.t, hg);
  std::vector<float> want_s(static_cast<size_t>(T));
  std::vector<uint8_t> want_packed(static_cast<size_t>(poffset[T]));
  std::vector<int32_t> want_zeros(static_cast<size_t>(T));
  std::vector<TernaryEncodeItem> items(static_cast<size_t>(T));
  const PhiloxKey key = philox_key(9, 2);
  for (int64_t k = 0; k < T; ++k) {
    want_s[k] = ternary_scaler_cpu(hg.data() + offset[k], sizes[k], kClip);
    want_zeros[k] = static_cast<int32_t>(ternary_encode_cpu(hg.data() + offset[k], sizes[k], want_s[k], key, kStep,
                                                            static_cast<uint32_t>(k), want_packed.data() + poffset[k]));
    items[k] = {g.t.slice0(offset[k], offset[k + 1]),        s.t.slice0(k, k + 1),     static_cast<uint32_t>(k),
                packed.t.slice0(poffset[k], poffset[k + 1]), zeros.t.slice0(k, k + 1), Tensor()};
  }
  auto scalers = [&] {
    for (const TernaryEncodeItem& it : items) be.ternary_scaler(it.g, kClip, it.scaler);
  };
  auto per_tensor = [&] {
    for (const TernaryEncodeItem& it : items)
      be.ternary_encode(it.g, it.scaler, key, kStep, it.tensor, it.packed, it.zero_count);
  };
  auto table = [&] { be.ternary_encode_many(items.data(), static_cast<int>(T), key, kStep); };
  guarded("codec resnet50 list", shape, [&] {
    poison(be, s.t), poison_any(be, packed.t);
    scalers();
    Stats st = compare_exact(download(be, s.t), want_s);
    per_tensor();
    st.merge(compare_exact(download_raw<uint8_t>(be, packed.t), want_packed));
    st.merge(compare_exact(download_raw<int32_t>(be, zeros.t), want_zeros));
    const double ms = time_ms(be, [&] { scalers(), per_tensor(); });
    report("codec resnet50 per-tensor", shape, st, ms, "2 launches + 1 per tensor", true, true,
           hbm(8.0 * total + poffset[T], ms, copy_gbs));
  });
  guarded("codec resnet50 table", shape, [&] {
    poison_any(be, packed.t);
    table();
    Stats st = compare_exact(download_raw<uint8_t>(be, packed.t), want_packed);
    st.merge(compare_exact(download_raw<int32_t>(be, zeros.t), want_zeros));
    const double ms = time_ms(be, [&] { scalers(), table(); });
    report("codec resnet50 table", shape, st, ms, "scalers + encode_many (1 launch / 64)", true, true,
           hbm(8.0 * total + poffset[T], ms, copy_gbs));
  });
}

}  // namespace

void group_codec(CudaBackend& be, const Options& o) {
  const int64_t n = o.small ? 1000003 : 61100840;  // AlexNet's parameter count
  const double copy_gbs = copy_ceiling(be, 4 * n);
  std::printf("%-22s %-30s %.0f GB/s (read + written; the ceiling the codec lines compare with)\n", "device copy",
              fmt::format("{} MB", 4 * n / 1000000).c_str(), copy_gbs);
  check_tensor(be, "alexnet", n, true, copy_gbs);
  check_tensor(be, "odd", 1001, false, copy_gbs);  // a tail shorter than a Philox block, an unaligned end
  check_tensor_list(be, copy_gbs);
}

}  // namespace tg::ops_check
