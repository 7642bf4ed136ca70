// y = x @ W^T for the few rows decoding multiplies (1 to ~96), fp32, CPU. Built by caddtree/kernels.py on first use.
// Two kernels: the panel kernel (any CPU with a C++ compiler) and, where the CPU and OS offer AMX, the AMX kernel
// below (opt-in: CADDTREE_CPU_KERNEL=amx).
//
// Panel kernel: W is pre-packed into panels [ceil(N/P), K, P]: panel b holds output columns Pb..Pb+P-1, row k of a
// panel is W[Pb:Pb+P, k]. A panel is read front to back exactly once from memory and then reused from L2 for every
// group of up to 6 input rows, so the weights stream at memory speed whatever the row count, and no horizontal sums
// are needed: each output is one accumulator lane, summed over k in order. That order does not depend on the other
// rows, so a row's result is the same bit for bit whether it is multiplied alone (plain decoding) or in a batch
// (tree verification). The panel width P is set by the vector registers the build targets (-march=native), so that
// 6 rows of accumulators plus one panel row stay in registers: 64 with AVX-512 (32 zmm: 24 + 4), 16 with AVX/AVX2
// (16 ymm: 12 + 2, the shape of BLIS's Haswell kernel), 8 with SSE only, 16 with 4-lane NEON (32 q registers). A
// 64-wide panel on AVX2 spills 48 accumulator registers to the stack: 5-15x slower from 5 rows on (an AMD EPYC
// without AVX-512, docs/design.md).
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__linux__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define CADDTREE_AMX 1
#endif

namespace {

#if defined(__AVX512F__)
constexpr int VL = 16;     // floats per vector register
constexpr int64_t P = 64;  // panel width
#elif defined(__AVX__)
constexpr int VL = 8;
constexpr int64_t P = 16;
#elif defined(__x86_64__) || defined(__i386__)
constexpr int VL = 4;
constexpr int64_t P = 8;
#else
constexpr int VL = 4;
constexpr int64_t P = 16;
#endif
constexpr int NV = int(P / VL);  // vectors per panel row
constexpr int G_MAX = 6;         // rows per pass: 6 x NV accumulators + NV weights fit the vector registers
typedef float vec __attribute__((vector_size(4 * VL)));  // GCC/Clang vector extension: one register

inline vec load(const float* p) { vec v; std::memcpy(&v, p, sizeof v); return v; }
inline void store(float* p, vec v) { std::memcpy(p, &v, sizeof v); }

// y[m0 : m0+G, n0 : n0+P] (clipped at N) from x [M, K] and one panel [K, P]
template <int G>
void panel_rows(const float* x, int64_t K, const float* panel, float* y, int64_t N, int64_t m0, int64_t n0) {
  vec acc[G][NV];
  for (int g = 0; g < G; ++g)
    for (int j = 0; j < NV; ++j) acc[g][j] = vec{};
  for (int64_t k = 0; k < K; ++k) {
    const float* w = panel + k * P;
    vec wk[NV];
    for (int j = 0; j < NV; ++j) wk[j] = load(w + VL * j);
    for (int g = 0; g < G; ++g) {
      const float s = x[(m0 + g) * K + k];
      for (int j = 0; j < NV; ++j) acc[g][j] += wk[j] * s;
    }
  }
  const int64_t valid = std::min(P, N - n0);
  for (int g = 0; g < G; ++g) {
    float out[P];
    for (int j = 0; j < NV; ++j) store(out + VL * j, acc[g][j]);
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

int64_t panel_width() { return P; }

// x [M, K] fp32 contiguous, panels [ceil(N/P), K, P] fp32 contiguous -> y [M, N]
torch::Tensor panel_linear(torch::Tensor x, torch::Tensor panels, int64_t N) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == torch::kFloat, "x: [M, K] contiguous fp32");
  TORCH_CHECK(panels.dim() == 3 && panels.is_contiguous() && panels.size(2) == P && panels.size(1) == x.size(1) &&
                  panels.size(0) * P >= N && panels.scalar_type() == torch::kFloat,
              "panels: [ceil(N/P), K, P] contiguous fp32 (P = panel_width())");
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


// ---------------------------------------------------------------------------------------------------- AMX kernel
// AMX multiplies bf16 tiles. To keep (close to) fp32 accuracy each fp32 value v is split into hi = bf16(v) and
// lo = bf16(v - hi), and y = x_hi W_hi + x_hi W_lo + x_lo W_hi, accumulated in fp32 (relative error ~1e-5; the
// dropped x_lo W_lo term is ~2^-16 of the product). Why: the panel kernel is bound by the FMA units from a few rows on
// (~3.5 ms per extra row for SmolLM2-135M), while one AMX tile product covers 16 rows at the cost of one, so a tree
// of up to 15 nodes costs about 1.2 plain steps (measured with `python scripts/compare_kernels.py`). Each output element is
// accumulated by the hardware in the same order whatever the other rows of its tile hold, so rows stay
// batch-invariant as with the panel kernel.
// Packed W: [ceil(N/64), Kp/32, 4 column tiles, 2 (hi, lo), 16 pair-rows, 32] bf16, the VNNI layout AMX reads
// (pair-row r, element 2c + j = W[n0 + c, k0 + 2r + j]); Kp = K rounded up to 32, zero-padded.
namespace {
constexpr int64_t TK = 32;    // inputs per tile step
constexpr int64_t TILE = 512; // bf16 per weight tile: 16 pair-rows x 32
constexpr int64_t ROWS = 16;  // rows per tile
constexpr int64_t AP = 64;    // output columns per packed panel: 4 column tiles

inline uint16_t bf16_round(float f) {  // round to nearest even (finite inputs)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFF + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}
inline float bf16_value(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// v ~ hi + lo in bf16, for weights and activations alike
inline void bf16_split(float v, uint16_t& hi, uint16_t& lo) {
  hi = bf16_round(v);
  lo = bf16_round(v - bf16_value(hi));
}

#ifdef CADDTREE_AMX
struct TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// tiles 0, 1: x hi, lo [m, 32]; 2, 3: W hi, lo [16 pair-rows, 32]; 4-7: y for the panel's 4 column tiles [m, 16]
void configure_tiles(int m) {
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = (t == 2 || t == 3) ? 16 : m;
  }
  _tile_loadconfig(&c);
}

// out [m, 64] (row stride 64) = rows xh/xl [m, Kp] times one packed panel
void amx_panel(const uint16_t* xh, const uint16_t* xl, int64_t Kp, const uint16_t* panel, float* out) {
  _tile_zero(4);
  _tile_zero(5);
  _tile_zero(6);
  _tile_zero(7);
  for (int64_t s = 0; s < Kp / TK; ++s) {
    _tile_loadd(0, xh + s * TK, Kp * 2);
    _tile_loadd(1, xl + s * TK, Kp * 2);
    const uint16_t* w = panel + s * 8 * TILE;
#define CADDTREE_COLUMN_TILE(J, Y)            \
    _tile_loadd(2, w + (2 * J) * TILE, 64);     \
    _tile_loadd(3, w + (2 * J + 1) * TILE, 64); \
    _tile_dpbf16ps(Y, 0, 2);                    \
    _tile_dpbf16ps(Y, 0, 3);                    \
    _tile_dpbf16ps(Y, 1, 2);
    CADDTREE_COLUMN_TILE(0, 4)
    CADDTREE_COLUMN_TILE(1, 5)
    CADDTREE_COLUMN_TILE(2, 6)
    CADDTREE_COLUMN_TILE(3, 7)
#undef CADDTREE_COLUMN_TILE
  }
  _tile_stored(4, out, 64 * 4);
  _tile_stored(5, out + 16, 64 * 4);
  _tile_stored(6, out + 32, 64 * 4);
  _tile_stored(7, out + 48, 64 * 4);
}
#endif

}  // namespace

// True where this build has the AMX kernel and the OS lets this process use the tiles (asked once).
bool amx_available() {
#ifdef CADDTREE_AMX
  static const bool ok = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
  return ok;
#else
  return false;
#endif
}

// W [N, K] fp32 contiguous -> the packed layout above (int16 storage of the bf16 bits)
torch::Tensor amx_pack(torch::Tensor w) {
  TORCH_CHECK(w.dim() == 2 && w.is_contiguous() && w.scalar_type() == torch::kFloat, "w: [N, K] contiguous fp32");
  const int64_t N = w.size(0), K = w.size(1), steps = (K + TK - 1) / TK, blocks = (N + AP - 1) / AP;
  auto packed = torch::zeros({blocks, steps, 4, 2, 16, 32}, torch::kInt16);
  uint16_t* o = reinterpret_cast<uint16_t*>(packed.data_ptr<int16_t>());
  const float* wp = w.data_ptr<float>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      const int64_t tile = ((n / AP) * steps + k / TK) * 4 + (n % AP) / 16;  // index of the (hi) tile
      const int64_t at = tile * 2 * TILE + (k % TK) / 2 * 32 + (n % 16) * 2 + k % 2;
      bf16_split(wp[n * K + k], o[at], o[at + TILE]);
    }
  return packed;
}

// x [M, K] fp32 contiguous, packed from amx_pack -> y [M, N]
torch::Tensor amx_linear(torch::Tensor x, torch::Tensor packed, int64_t N) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == torch::kFloat, "x: [M, K] contiguous fp32");
  TORCH_CHECK(packed.dim() == 6 && packed.scalar_type() == torch::kInt16 && packed.size(1) * TK >= x.size(1) &&
                  packed.size(1) * TK - x.size(1) < TK && packed.size(0) * AP >= N,
              "packed: amx_pack of a [N, K] weight");
#ifdef CADDTREE_AMX
  TORCH_CHECK(amx_available(), "AMX tiles not available to this process");
  const int64_t M = x.size(0), K = x.size(1), Kp = packed.size(1) * TK, blocks = packed.size(0);
  std::vector<uint16_t> split(2 * M * Kp, 0);  // x hi [M, Kp], then x lo [M, Kp]
  uint16_t* xh = split.data();
  uint16_t* xl = split.data() + M * Kp;
  const float* xp = x.data_ptr<float>();
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) bf16_split(xp[m * K + k], xh[m * Kp + k], xl[m * Kp + k]);
  auto y = torch::empty({M, N}, x.options());
  float* yp = y.data_ptr<float>();
  const uint16_t* pp = reinterpret_cast<const uint16_t*>(packed.data_ptr<int16_t>());
  const int64_t panel_size = (Kp / TK) * 8 * TILE;
  at::parallel_for(0, blocks, 4, [&](int64_t b0, int64_t b1) {  // tile state is per thread: configure here
    alignas(64) float out[ROWS * AP];
    int configured = 0;
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t m0 = 0; m0 < M; m0 += ROWS) {  // a panel stays in L2 across the row groups
        const int m = int(std::min(ROWS, M - m0));
        if (m != configured) configure_tiles(configured = m);
        amx_panel(xh + m0 * Kp, xl + m0 * Kp, Kp, pp + b * panel_size, out);
        const int64_t n0 = b * AP, valid = std::min(AP, N - n0);
        for (int r = 0; r < m; ++r) std::memcpy(yp + (m0 + r) * N + n0, out + r * AP, valid * sizeof(float));
      }
    _tile_release();
  });
  return y;
#else
  TORCH_CHECK(false, "this build has no AMX kernel");
  return x;
#endif
}

// quant_linear.cpp
torch::Tensor quant_linear(torch::Tensor x, torch::Tensor blocks, int64_t type);
torch::Tensor quant_dequantize(torch::Tensor blocks, int64_t type, int64_t K);
std::tuple<torch::Tensor, int64_t> quant_repack(torch::Tensor blocks, int64_t type, int64_t K);
int64_t quant_rows_per_strip();
int64_t quant_row_group();
// attention.cpp
torch::Tensor row_attention(torch::Tensor q, torch::Tensor keys, torch::Tensor values, torch::Tensor allowed,
                            double scale, double softcap);
// lean_layers.cpp, draft_layers.cpp
void register_lean_layers(pybind11::module_& m);
void register_draft_layers(pybind11::module_& m);
// sample.cpp
int64_t sample_processed(const torch::Tensor& logits, double temperature, int64_t top_k, double top_p, double u);
std::tuple<torch::Tensor, torch::Tensor> processed_law(const torch::Tensor& logits, double temperature,
                                                       int64_t top_k, double top_p);
torch::Tensor row_argmax(const torch::Tensor& logits);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("panel_width", &panel_width, "output columns per panel in this build");
  m.def("panel_linear", &panel_linear, "y = x @ W^T from W's panels");
  m.def("amx_available", &amx_available, "the AMX kernel can run here");
  m.def("amx_pack", &amx_pack, "W [N, K] -> AMX bf16 hi/lo tiles");
  m.def("amx_linear", &amx_linear, "y = x @ W^T from amx_pack(W)");
  m.def("quant_linear", &quant_linear, "y = x @ W^T from W's GGUF blocks as stored");
  m.def("quant_dequantize", &quant_dequantize, "GGUF blocks -> fp32 W, as quant_linear reads them");
  m.def("quant_repack", &quant_repack, "GGUF blocks -> (the layout quant_linear runs, its type)");
  m.def("quant_rows_per_strip", &quant_rows_per_strip, "weight rows per strip in this build");
  m.def("quant_row_group", &quant_row_group, "input rows per pass over a strip in this build");
  m.def("row_attention", &row_attention, "attention of each query row over its allowed columns, row-invariant");
  m.def("sample_processed", &sample_processed, "one draw from the processed law (temperature, top-k, top-p)");
  m.def("row_argmax", &row_argmax, "each row's first maximal entry, as torch.argmax");
  m.def("processed_law", &processed_law, "the processed law's kept tokens and probabilities");
  register_lean_layers(m);  // class LeanLayers: the decoder layers of a Llama-shaped model in one call
  register_draft_layers(m);  // class DraftLayers: the DFlash drafter's draft pass in one call
}
