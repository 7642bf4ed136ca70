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

#include "vec16.h"

namespace {

using namespace vec16;

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
