// y = x @ W^T for the few rows decoding multiplies (1 to ~96), fp32, CPU. Built by caddtree/kernels.py on first use.
//
// W is pre-packed into panels [ceil(N/64), K, 64]: panel b holds output columns 64b..64b+63, row k of a panel is
// W[64b:64b+64, k]. A panel is read front to back exactly once from memory and then reused from L2 for every group
// of up to 6 input rows, so the weights stream at memory speed whatever the row count, and no horizontal sums are
// needed: each output is one accumulator lane, summed over k in order. That order does not depend on the other rows,
// so a row's result is the same bit for bit whether it is multiplied alone (plain decoding) or in a batch (tree
// verification).
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>

namespace {

typedef float v16 __attribute__((vector_size(64)));  // GCC/Clang vector: AVX-512, 2x AVX2 or 4x NEON registers
constexpr int64_t P = 64;                              // panel width: 4 vectors
constexpr int G_MAX = 6;                               // rows per pass: 6 x 4 accumulators + 4 weights fit 32 zmm

inline v16 load(const float* p) { v16 v; std::memcpy(&v, p, sizeof v); return v; }
inline void store(float* p, v16 v) { std::memcpy(p, &v, sizeof v); }

// y[m0 : m0+G, n0 : n0+64] (clipped at N) from x [M, K] and one panel [K, 64]
template <int G>
void panel_rows(const float* x, int64_t K, const float* panel, float* y, int64_t N, int64_t m0, int64_t n0) {
  v16 acc[G][4];
  for (int g = 0; g < G; ++g)
    for (int j = 0; j < 4; ++j) acc[g][j] = v16{};
  for (int64_t k = 0; k < K; ++k) {
    const float* w = panel + k * P;
    const v16 w0 = load(w), w1 = load(w + 16), w2 = load(w + 32), w3 = load(w + 48);
    for (int g = 0; g < G; ++g) {
      const float s = x[(m0 + g) * K + k];
      acc[g][0] += w0 * s;
      acc[g][1] += w1 * s;
      acc[g][2] += w2 * s;
      acc[g][3] += w3 * s;
    }
  }
  const int64_t valid = std::min(P, N - n0);
  for (int g = 0; g < G; ++g) {
    float out[P];
    for (int j = 0; j < 4; ++j) store(out + 16 * j, acc[g][j]);
    std::memcpy(y + (m0 + g) * N + n0, out, valid * sizeof(float));
  }
}

void panel_all_rows(const float* x, int64_t M, int64_t K, const float* panel, float* y, int64_t N, int64_t n0) {
  int64_t m = 0;
  for (; m + G_MAX <= M; m += G_MAX) panel_rows<G_MAX>(x, K, panel, y, N, m, n0);
  switch (M - m) {
    case 5: panel_rows<5>(x, K, panel, y, N, m, n0); break;
    case 4: panel_rows<4>(x, K, panel, y, N, m, n0); break;
    case 3: panel_rows<3>(x, K, panel, y, N, m, n0); break;
    case 2: panel_rows<2>(x, K, panel, y, N, m, n0); break;
    case 1: panel_rows<1>(x, K, panel, y, N, m, n0); break;
    default: break;
  }
}

}  // namespace

// x [M, K] fp32 contiguous, panels [ceil(N/64), K, 64] fp32 contiguous -> y [M, N]
torch::Tensor panel_linear(torch::Tensor x, torch::Tensor panels, int64_t N) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == torch::kFloat, "x: [M, K] contiguous fp32");
  TORCH_CHECK(panels.dim() == 3 && panels.is_contiguous() && panels.size(2) == P && panels.size(1) == x.size(1) &&
                  panels.size(0) * P >= N && panels.scalar_type() == torch::kFloat,
              "panels: [ceil(N/64), K, 64] contiguous fp32");
  const int64_t M = x.size(0), K = x.size(1), blocks = panels.size(0);
  auto y = torch::empty({M, N}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* pp = panels.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, blocks, 4, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) panel_all_rows(xp, M, K, pp + b * K * P, yp, N, b * P);
  });
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("panel_linear", &panel_linear, "y = x @ W^T from W's panels"); }
