// Attention for the few query rows decoding runs (a plain step: 1; a tree verify: n + 1), fp32, CPU, row-invariant.
// Built with panel_linear.cpp into one extension by caddtree/kernels.py.
//
// Why not SDPA: PyTorch's CPU SDPA blocks the query rows and the key columns, so a row's result changes with the
// number of rows in the call and with masked columns around its own (measured: a tree node's output differs in the
// last bits from the plain step that attends the same keys). Here each (row, head) attends only its allowed columns,
// in cache order, with one fixed sequence of operations: scores s_j = (q·k_j)·scale (lanes over d, one horizontal
// sum), m = max s_j, p_j = exp(s_j - m) (one vectorised polynomial), l = Σ p_j in column order, w_j = p_j / l,
// out = Σ w_j v_j in column order. A tree node's
// allowed columns are the committed context plus its ancestors: the same keys and values, in the same order, as the
// plain step that would decode it, so its output is the same bit for bit. Masked columns cost nothing.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstring>
#include <cstdint>
#include <limits>
#include <vector>

namespace {

// 16 floats as one GCC/Clang vector (one zmm with AVX-512, two ymm with AVX2): the same code on every CPU, and each
// lane computed by the same instructions whatever the row, so results depend on a row's own data only
typedef float v16 __attribute__((vector_size(64)));
typedef int32_t i16 __attribute__((vector_size(64)));
constexpr int W = 16;

inline v16 load(const float* p) { v16 v; std::memcpy(&v, p, sizeof v); return v; }
inline void store(float* p, v16 v) { std::memcpy(p, &v, sizeof v); }
inline float sum(v16 v) {  // a fixed tree
  float s8[8], s4[4];
  for (int l = 0; l < 8; ++l) s8[l] = v[l] + v[l + 8];
  for (int l = 0; l < 4; ++l) s4[l] = s8[l] + s8[l + 4];
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

// e^x for x <= 0 (x = s - max s; below -87 the weight is 0 in fp32 terms anyway): Cephes' expf polynomial on the
// reduced argument, elementwise and deterministic (~1 ulp)
inline v16 exp_nonpositive(v16 x) {
  const v16 lo = v16{} - 87.0f;
  x = x < lo ? lo : x;
  const v16 t = x * 1.44269504088896341f - 0.5f;  // n = round(x / ln 2): x <= 0, so truncating t - 0.5 rounds
  const i16 n = __builtin_convertvector(t, i16);
  const v16 nf = __builtin_convertvector(n, v16);
  const v16 r = (x - nf * 0.693359375f) + nf * 2.12194440e-4f;
  v16 p = v16{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = (p * r) * r + r + 1.0f;
  const i16 bits = (n + 127) << 23;  // 2^n, n >= -126
  v16 scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// scores[c] = (q · k_cols[c]) · scale for the r query heads of one KV head; q [r, d]
inline void scores(const float* q, int64_t r, const float* k, int64_t d, const std::vector<int64_t>& cols,
                   float scale, float* s, int64_t stride) {
  for (size_t c = 0; c < cols.size(); ++c) {
    const float* kj = k + cols[c] * d;
    for (int64_t a = 0; a < r; ++a) {
      v16 acc{};
      for (int64_t e = 0; e < d; e += W) acc += load(q + a * d + e) * load(kj + e);
      s[a * stride + c] = sum(acc) * scale;
    }
  }
}

}  // namespace

// q [n, h, d]; keys, values [g, L, d] (row stride d, head stride given: views of a cache buffer); allowed [n, L] bool
// or an empty tensor (then row i sees columns 0 .. L - n + i: causal after the cache) -> out [n, h, d]
torch::Tensor row_attention(torch::Tensor q, torch::Tensor keys, torch::Tensor values, torch::Tensor allowed,
                            double scale) {
  TORCH_CHECK(q.dim() == 3 && q.is_contiguous() && q.scalar_type() == torch::kFloat, "q: [n, h, d] contiguous fp32");
  TORCH_CHECK(keys.dim() == 3 && values.dim() == 3 && keys.sizes() == values.sizes() &&
                  keys.stride(2) == 1 && values.stride(2) == 1 && keys.stride(1) == keys.size(2) &&
                  values.stride(1) == values.size(2) && keys.scalar_type() == torch::kFloat &&
                  values.scalar_type() == torch::kFloat,
              "keys, values: [g, L, d] fp32 with contiguous rows");
  const int64_t n = q.size(0), h = q.size(1), d = q.size(2), g = keys.size(0), L = keys.size(1);
  TORCH_CHECK(keys.size(2) == d && h % g == 0 && L >= n, "shapes: q [n, h, d], keys [g, L >= n, d], h % g == 0");
  const bool masked = allowed.numel() > 0;
  TORCH_CHECK(!masked || (allowed.dim() == 2 && allowed.size(0) == n && allowed.size(1) == L && allowed.is_contiguous()
                          && allowed.scalar_type() == torch::kBool), "allowed: [n, L] contiguous bool or empty");
  auto out = torch::empty({n, h, d}, q.options());
  const float* qp = q.data_ptr<float>();
  const float* kp = keys.data_ptr<float>();
  const float* vp = values.data_ptr<float>();
  const int64_t ks = keys.stride(0), vs = values.stride(0);
  const bool* ap = masked ? allowed.data_ptr<bool>() : nullptr;
  float* op = out.data_ptr<float>();
  const int64_t r = h / g;
  TORCH_CHECK(d % W == 0, "row_attention: head_dim must be a multiple of 16");
  at::parallel_for(0, n * g, 1, [&](int64_t t0, int64_t t1) {
    std::vector<int64_t> cols;
    std::vector<float> p;   // [r, stride]: scores, then weights
    std::vector<float> acc(r * d);
    std::vector<float> qs(r * d);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i = t / g, kv = t % g;  // query row, KV head (query heads kv·r .. kv·r + r - 1)
      cols.clear();
      if (masked) {
        for (int64_t j = 0; j < L; ++j)
          if (ap[i * L + j]) cols.push_back(j);
      } else {
        for (int64_t j = 0; j <= L - n + i; ++j) cols.push_back(j);
      }
      const int64_t C = int64_t(cols.size()), stride = (C + W - 1) / W * W;
      p.assign(r * stride, -std::numeric_limits<float>::infinity());  // padding: weight exp(-inf - m) = 0, unused
      scores(qp + (i * h + kv * r) * d, r, kp + kv * ks, d, cols, float(scale), p.data(), stride);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t a = 0; a < r; ++a) {
        float* pa = p.data() + a * stride;
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t c = 0; c < C; ++c) m = std::max(m, pa[c]);
        float l = 0.0f;
        for (int64_t c = 0; c < stride; c += W) store(pa + c, exp_nonpositive(load(pa + c) - m));
        for (int64_t c = 0; c < C; ++c) l += pa[c];
        for (int64_t c = 0; c < C; ++c) pa[c] /= l;
      }
      for (int64_t c = 0; c < C; ++c) {  // o_a = Σ_c w_ac v_c, in column order
        const float* vj = vp + kv * vs + cols[c] * d;
        for (int64_t e = 0; e < d; e += W) {
          const v16 v = load(vj + e);
          for (int64_t a = 0; a < r; ++a) store(acc.data() + a * d + e, load(acc.data() + a * d + e) + p[a * stride + c] * v);
        }
      }
      for (int64_t a = 0; a < r; ++a)
        std::memcpy(op + (i * h + kv * r + a) * d, acc.data() + a * d, d * sizeof(float));
      if (C == 0)
        for (int64_t a = 0; a < r; ++a) std::fill(op + (i * h + kv * r + a) * d, op + (i * h + kv * r + a + 1) * d, 0.0f);
    }
  });
  return out;
}
