// Attention for the few query rows decoding runs (a plain step: 1; a tree verify: n + 1), fp32, CPU, row-invariant.
// Built with panel_linear.cpp into one extension by caddtree/kernels.py.
//
// Why not SDPA: PyTorch's CPU SDPA blocks the query rows and the key columns, so a row's result changes with the number
// of rows in the call and with masked columns around its own (measured: a tree node's output differs in the last bits
// from the plain step that attends the same keys). Here each (row, head) attends only its allowed columns, in cache
// order, with one fixed sequence of operations: scores s_j = (q·k_j)·scale (lanes over d, one horizontal sum; Gemma2's
// soft-capping: s_j = cap · tanh(s_j / cap), each column alone), m = max s_j, p_j = exp(s_j - m) (one vectorised
// polynomial), l = Σ p_j in column order, w_j = p_j / l, out = Σ w_j v_j in column order. A tree node's allowed columns
// are the committed context plus its ancestors: the same keys and values, in the same order, as the plain step that
// would decode it, so its output is the same bit for bit. Masked columns cost nothing.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <limits>
#include <vector>

#include "vec16.h"

namespace {

using namespace vec16;

// the horizontal sums of 16 vectors at once: lane j = sum(a[j]), the same tree as `sum` (lanes l + l+8, then + l+4,
// then (0 + 2) + (1 + 3)), each level a lane-wise add of two shuffles of neighbouring vectors: ~3 instructions a
// vector where `sum` alone takes ~15, and the same bits
inline v16 sum16(const v16* a) {
  const i16 half_lo = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23};  // s8: lanes l, l + 8 of two vectors
  const i16 half_hi = half_lo + 8;
  const i16 quarter_lo = {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27};  // s4: lanes l, l + 4 of s8
  const i16 quarter_hi = quarter_lo + 4;
  const i16 pair_lo = {0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29};  // t: lanes l, l + 2 of s4
  const i16 pair_hi = pair_lo + 2;
  const i16 even = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};  // t[0] + t[1]
  const i16 odd = even + 1;
  v16 s8[8], s4[4], t[2];
  for (int j = 0; j < 8; ++j)  // s8[j]: columns 2j, 2j + 1 (8 lanes each)
    s8[j] = __builtin_shuffle(a[2 * j], a[2 * j + 1], half_lo) + __builtin_shuffle(a[2 * j], a[2 * j + 1], half_hi);
  for (int j = 0; j < 4; ++j)  // s4[j]: columns 4j .. 4j + 3 (4 lanes each)
    s4[j] = __builtin_shuffle(s8[2 * j], s8[2 * j + 1], quarter_lo) +
            __builtin_shuffle(s8[2 * j], s8[2 * j + 1], quarter_hi);
  for (int j = 0; j < 2; ++j)  // t[j]: columns 8j .. 8j + 7 (2 lanes each)
    t[j] = __builtin_shuffle(s4[2 * j], s4[2 * j + 1], pair_lo) + __builtin_shuffle(s4[2 * j], s4[2 * j + 1], pair_hi);
  return __builtin_shuffle(t[0], t[1], even) + __builtin_shuffle(t[0], t[1], odd);
}

// s[c] = sum(q · k_cols[c]) · scale for one query head q [d], 16 columns at a time (the last group padded with its
// last column); each column's products and sums are the same whatever its group, so its score is too
inline void scores(const float* q, const float* k, int64_t d, const std::vector<int64_t>& cols, float scale, float* s) {
  const int64_t C = int64_t(cols.size());
  for (int64_t c0 = 0; c0 < C; c0 += W) {
    v16 acc[W];
    for (int64_t j = 0; j < W; ++j) {
      const float* kj = k + cols[std::min(c0 + j, C - 1)] * d;
      v16 a{};
      for (int64_t e = 0; e < d; e += W) a += load(q + e) * load(kj + e);
      acc[j] = a;
    }
    const v16 r = sum16(acc);
    for (int64_t j = 0; j < W && c0 + j < C; ++j) s[c0 + j] = r[j] * scale;
  }
}

// o[0:d] = Σ_c w[c] v[cols[c]] in column order (0 where there is no column), the d/16 lane groups of o accumulated
// side by side (up to 8 at once) so the adds of one group do not wait on each other's latency: each lane still sums
// its columns in order, so the bits are those of one group at a time
inline void weighted_values(const float* w, const std::vector<int64_t>& cols, const float* v, int64_t d, float* o) {
  constexpr int64_t G = 8;
  const int64_t C = int64_t(cols.size());
  for (int64_t e0 = 0; e0 < d; e0 += G * W) {
    const int64_t groups = std::min<int64_t>(G, (d - e0) / W);
    v16 acc[G] = {};
    for (int64_t c = 0; c < C; ++c) {
      const float* vc = v + cols[c] * d + e0;
      for (int64_t j = 0; j < groups; ++j) acc[j] += w[c] * load(vc + j * W);
    }
    for (int64_t j = 0; j < groups; ++j) store(o + e0 + j * W, acc[j]);
  }
}

}  // namespace

// q [n, h, d]; keys, values [g, L, d] (row stride d, head stride given: views of a cache buffer); allowed [n, L] bool
// or an empty tensor (then row i sees columns 0 .. L - n + i: causal after the cache); softcap > 0: the scores
// soft-capped (Gemma2), 0: not -> out [n, h, d]
torch::Tensor row_attention(torch::Tensor q, torch::Tensor keys, torch::Tensor values, torch::Tensor allowed,
                            double scale, double softcap) {
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
  TORCH_CHECK(d % W == 0, "row_attention: head_dim must be a multiple of 16");
  // one task per (row, query head): a plain step's 9 heads (SmolLM2) split 5/4 over 2 threads, where its 3 KV heads
  // split 2/1; the r = h / g heads of a group each read the group's keys (from cache after the first)
  const int64_t r = h / g;
  const float cap = float(softcap);
  at::parallel_for(0, n * h, 1, [&](int64_t t0, int64_t t1) {
    std::vector<int64_t> cols;
    std::vector<float> p;  // [stride]: scores, then weights
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i = t / h, head = t % h, kv = head / r;  // query row, query head, its KV head
      cols.clear();
      if (masked) {
        for (int64_t j = 0; j < L; ++j)
          if (ap[i * L + j]) cols.push_back(j);
      } else {
        for (int64_t j = 0; j <= L - n + i; ++j) cols.push_back(j);
      }
      const int64_t C = int64_t(cols.size()), stride = (C + W - 1) / W * W;
      p.assign(stride, -std::numeric_limits<float>::infinity());  // padding: weight exp(-inf - m) = 0, unused
      scores(qp + (i * h + head) * d, kp + kv * ks, d, cols, float(scale), p.data());
      if (cap > 0.0f)
        for (int64_t c = 0; c < C; ++c) p[c] = cap * std::tanh(p[c] / cap);
      v16 mv = load(p.data());  // the max in 16 lanes (exact in any order; the padding is -inf)
      for (int64_t c = W; c < stride; c += W) mv = mv > load(p.data() + c) ? mv : load(p.data() + c);
      float m = mv[0];
      for (int l = 1; l < W; ++l) m = std::max(m, mv[l]);
      for (int64_t c = 0; c < stride; c += W) store(p.data() + c, exp_nonpositive(load(p.data() + c) - m));
      float l = 0.0f;
      for (int64_t c = 0; c < C; ++c) l += p[c];
      const v16 lv = v16{} + l;
      for (int64_t c = 0; c < stride; c += W) store(p.data() + c, load(p.data() + c) / lv);  // lane-wise: p[c] / l
      weighted_values(p.data(), cols, vp + kv * vs, d, op + (i * h + head) * d);
    }
  });
  return out;
}
