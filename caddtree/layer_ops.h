// What the layer loops of lean_layers.cpp (the target) and draft_layers.cpp (the DFlash drafter) share: a linear on
// the CPU kernels and the per-row steps of a decoder layer (RMSNorm, RoPE, the gated activation), each reading one row's
// own data with the same instructions whatever the row (batch invariance: lean_layers.cpp states the invariant).
#pragma once

#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>

#include "vec16.h"

// the kernels the layer loops call: a Linear's (quant_linear.cpp, panel_linear.cpp) and attention (attention.cpp)
torch::Tensor quant_linear(torch::Tensor x, torch::Tensor blocks, int64_t type);
torch::Tensor panel_linear(torch::Tensor x, torch::Tensor panels, int64_t N);
torch::Tensor row_attention(torch::Tensor q, torch::Tensor keys, torch::Tensor values, torch::Tensor allowed,
                            double scale, double softcap);

namespace layer_ops {

using namespace vec16;

constexpr int64_t ROW_GRAIN = 8;  // rows per task of the row loops: a plain step runs on the calling thread

struct Linear {
  torch::Tensor weights, bias;  // GGUF blocks [N, K/32 · bytes] or panels [ceil(N/P), K, P]; bias [N] or empty
  int64_t kind = 0, arg = 0;    // 0: quant_linear (arg: ggml type), 1: panel_linear (arg: N)
  torch::Tensor operator()(const torch::Tensor& x) const {  // x [n, K] -> [n, N]
    auto y = kind == 0 ? quant_linear(x, weights, arg) : panel_linear(x, weights, arg);
    if (bias.numel()) y.add_(bias);
    return y;
  }
};

// out[0:K] = w · (x / sqrt(mean(x²) + eps)): squares summed in 16 lanes (fixed tree), then the tail in order
inline void rms_norm_row(const float* x, const float* w, int64_t K, float eps, float* out) {
  v16 acc{};
  int64_t e = 0;
  for (; e + W <= K; e += W) {
    const v16 v = load(x + e);
    acc += v * v;
  }
  float s = sum(acc);
  for (; e < K; ++e) s += x[e] * x[e];
  const float r = 1.0f / std::sqrt(s / float(K) + eps);
  for (e = 0; e < K; ++e) out[e] = w[e] * (x[e] * r);
}

// out[0:d] = x · cos + rotate_half(x) · sin, rotate_half(x) = [-x[d/2:], x[:d/2]]
inline void rope_row(const float* x, const float* cos, const float* sin, int64_t d, float* out) {
  const int64_t half = d / 2;
  for (int64_t e = 0; e < half; ++e) out[e] = x[e] * cos[e] - x[e + half] * sin[e];
  for (int64_t e = half; e < d; ++e) out[e] = x[e] * cos[e] + x[e - half] * sin[e];
}

// out[0:I] = act(g) · u, act(g) = g · sigmoid(z): silu z = g; gelu-tanh z = 2·sqrt(2/pi)·(g + 0.044715 g³), since
// 0.5 (1 + tanh(y)) = sigmoid(2y); sigmoid from e^-|z| (never overflows)
inline void act_mul_row(const float* g, const float* u, int64_t I, bool gelu, float* out) {
  constexpr float k = 1.5957691216057308f, c = 0.044715f;
  int64_t e = 0;
  const v16 one = v16{} + 1.0f;
  for (; e + W <= I; e += W) {
    const v16 x = load(g + e);
    const v16 z = gelu ? k * (x + c * (x * x * x)) : x;
    const v16 t = exp_nonpositive(z < 0 ? z : -z);  // e^-|z|
    const v16 sig = z < 0 ? t / (t + one) : one / (t + one);
    store(out + e, x * sig * load(u + e));
  }
  for (; e < I; ++e) {
    const float z = gelu ? k * (g[e] + c * (g[e] * g[e] * g[e])) : g[e];
    out[e] = g[e] / (1.0f + std::exp(-z)) * u[e];
  }
}

inline void norm_rows(const torch::Tensor& x, const torch::Tensor& w, float eps, torch::Tensor& out) {  // [n, H] -> [n, H]
  const int64_t n = x.size(0), H = x.size(1);
  const float *xp = x.data_ptr<float>(), *wp = w.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, n, ROW_GRAIN, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) rms_norm_row(xp + i * H, wp, H, eps, op + i * H);
  });
}

}  // namespace layer_ops
