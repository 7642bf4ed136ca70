// The DFlash drafter's draft pass (caddtree/dflash.py: DFlashModel.fuse, Layer.draft_forward, the final norm) for one
// block in one C++ call, CPU, fp32 activations. Built with panel_linear.cpp into one extension by caddtree/kernels.py.
//
// Why: the drafter's arithmetic is small (two 576-wide layers, 8 rows), so at a native target's ~8 ms step the ~60
// PyTorch calls of the Python pass (norms, RoPE, cache writes, SDPA, silu, residuals, the wrappers around fbgemm) and
// their Python cost ~2.5 ms of a ~3.6 ms draft. Here they are loops over each row's own data, and the linears
// (quant_linear on fp16 rows: the weights fbgemm's fp16 path rounds to) and attention (row_attention) are called
// directly.
//
// One block, k new context rows (features [k, F] of the positions C .. C+k-1) and B block rows (the root's embedding,
// then B - 1 mask embeddings) at positions C+k .. C+k+B-1:
//   c = hidden_norm(features Wfc^T)  [k, H]: the context rows every layer's keys and values come from;
//   per layer: a = ln1(x);  [k | v] of the rows [c; a] -> cache rows C .. C+k+B-1 (k RoPE'd; qwen3: k, q normed per head
//   first);  q = RoPE(a Wq^T);  x += attention(q over all C+k+B cache rows, no mask: a block sees its whole context
//   and itself both ways) Wo^T;  a = ln2(x);  x += (silu(a Wg^T) · a Wu^T) Wd^T;
//   out = norm(x)  [B, H].
// The context rows C .. C+k-1 are kept (the context grows by k); the block's B rows after them are scratch.
// Not exact against the Python pass (fp16 weights, another summation order): a drafter need not be, and
// tests/test_dflash.py checks the two agree to fp32 rounding on the same fp16 weights.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <cstring>
#include <vector>

#include "layer_ops.h"

namespace {

using namespace layer_ops;

struct DraftLayer {
  torch::Tensor ln1, ln2, qk_norm;  // [H], [H]; qwen3: [h + g, d] (q's weight on q heads, k's on k heads), else empty
  float eps1, eps2, qk_eps;
  Linear q, kv, o, gate_up, down;  // kv: [k | v] out; gate_up: [g | u] out, I columns each
  int64_t inter;
};

Linear linear_of(const torch::Tensor* t, const int64_t* k) {  // (weights, bias), (kind, arg)
  return Linear{t[0], t[1], k[0], k[1]};
}

}  // namespace

class DraftLayers {
 public:
  // fc: (weights, bias) and (kind, arg) of the context projection [F -> H], hidden_norm [H] and its eps; norm [H] (the
  // final norm) and its eps. Per layer, in order: tensors (13) ln1, q weights, q bias, kv weights, kv bias, qk_norm, o
  // weights, o bias, ln2, gate_up weights, gate_up bias, down weights, down bias (an empty tensor for none); ints (11)
  // kind and arg of q, kv, o, gate_up, down, then I; floats (3) eps1, eps2, qk_eps.
  DraftLayers(std::vector<torch::Tensor> fc, std::vector<int64_t> fc_kind, torch::Tensor hidden_norm, double hidden_eps,
              torch::Tensor norm, double norm_eps, std::vector<torch::Tensor> t, std::vector<int64_t> ints,
              std::vector<double> floats, int64_t h, int64_t g, int64_t d, double scale)
      : hidden_norm_(hidden_norm), norm_(norm), hidden_eps_(float(hidden_eps)), norm_eps_(float(norm_eps)), h_(h),
        g_(g), d_(d), scale_(scale) {
    const size_t count = t.size() / 13;
    TORCH_CHECK(fc.size() == 2 && fc_kind.size() == 2, "DraftLayers: fc (weights, bias) and (kind, arg)");
    TORCH_CHECK(count > 0 && t.size() == count * 13 && ints.size() == count * 11 && floats.size() == count * 3,
                "DraftLayers: 13 tensors, 11 ints and 3 floats per layer");
    TORCH_CHECK(d % W == 0 && h % g == 0, "DraftLayers: head_dim a multiple of 16, heads a multiple of KV heads");
    fc_ = linear_of(fc.data(), fc_kind.data());
    for (size_t i = 0; i < count; ++i) {
      const torch::Tensor* a = &t[13 * i];
      const int64_t* k = &ints[11 * i];
      for (int j = 0; j < 13; ++j)
        TORCH_CHECK(!a[j].numel() || (a[j].is_contiguous() && a[j].device().is_cpu()), "DraftLayers: CPU tensors");
      DraftLayer L;
      L.ln1 = a[0], L.qk_norm = a[5], L.ln2 = a[8];
      L.q = linear_of(a + 1, k), L.kv = linear_of(a + 3, k + 2), L.o = linear_of(a + 6, k + 4);
      L.gate_up = linear_of(a + 9, k + 6), L.down = linear_of(a + 11, k + 8);
      L.inter = k[10];
      L.eps1 = float(floats[3 * i]), L.eps2 = float(floats[3 * i + 1]), L.qk_eps = float(floats[3 * i + 2]);
      layers_.push_back(L);
    }
  }

  // features [k, F] fp32 (k may be 0: an empty tensor), x [B, H] the block's input embeddings (not modified), cos/sin
  // [k + B, d] the rotation of positions C .. C+k+B-1, k_bufs/v_bufs per layer [g, >= C + k + B, d] whose first C rows
  // are the context's keys/values (rows C .. C+k+B-1 are written here) -> [B, H] the block's normed hidden states.
  torch::Tensor forward(torch::Tensor features, torch::Tensor x, torch::Tensor cos, torch::Tensor sin,
                        std::vector<torch::Tensor> k_bufs, std::vector<torch::Tensor> v_bufs, int64_t C) {
    const int64_t B = x.size(0), H = x.size(1), k = features.numel() ? features.size(0) : 0, R = k + B;
    const int64_t h = h_, g = g_, d = d_;
    TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat && cos.sizes() == sin.sizes() && cos.dim() == 2 &&
                    cos.size(0) == R && cos.size(1) == d && cos.is_contiguous() && sin.is_contiguous() &&
                    cos.scalar_type() == torch::kFloat && sin.scalar_type() == torch::kFloat,
                "DraftLayers.forward: x [B, H] fp32, cos and sin [k + B, d] contiguous fp32");
    TORCH_CHECK(!k || (features.dim() == 2 && features.scalar_type() == torch::kFloat && features.is_contiguous()),
                "DraftLayers.forward: features [k, F] contiguous fp32");
    TORCH_CHECK(k_bufs.size() == layers_.size() && v_bufs.size() == layers_.size(), "one k and v buffer per layer");
    auto rows = torch::empty({R, H}, x.options());  // [c; a]: the new context rows, then the block's normed rows
    if (k) {
      auto c = rows.narrow(0, 0, k);
      norm_rows(fc_(features), hidden_norm_, hidden_eps_, c);
    }
    auto a = rows.narrow(0, k, B);
    x = x.clone(at::MemoryFormat::Contiguous);
    auto q = torch::empty({B, h, d}, x.options());
    auto all = torch::ones({B, C + R}, x.options().dtype(torch::kBool));  // every block row sees every cache row
    for (size_t i = 0; i < layers_.size(); ++i) {
      const DraftLayer& L = layers_[i];
      auto& kb = k_bufs[i];
      auto& vb = v_bufs[i];
      TORCH_CHECK(kb.sizes() == vb.sizes() && kb.dim() == 3 && kb.size(0) == g && kb.size(1) >= C + R &&
                      kb.size(2) == d && kb.stride(2) == 1 && kb.stride(1) == d && vb.stride(2) == 1 &&
                      vb.stride(1) == d && kb.scalar_type() == torch::kFloat && vb.scalar_type() == torch::kFloat,
                  "layer ", i, ": k and v buffers [g, >= C + k + B, d] fp32 with contiguous rows");
      norm_rows(x, L.ln1, L.eps1, a);
      write_kv(L, L.kv(rows), cos, sin, C, kb, vb);  // [R, 2 g d] -> cache rows C .. C+R-1
      rotate_q(L, L.q(a), cos, sin, k, q);           // [B, h d] -> [B, h, d]
      const auto att = row_attention(q, kb.narrow(1, 0, C + R), vb.narrow(1, 0, C + R), all, scale_, 0.0);
      x.add_(L.o(att.view({B, h * d})));
      norm_rows(x, L.ln2, L.eps2, a);
      const auto gu = L.gate_up(a);  // [B, 2I]
      auto act = torch::empty({B, L.inter}, x.options());
      const float* gp = gu.data_ptr<float>();
      float* ap = act.data_ptr<float>();
      const int64_t I = L.inter;
      for (int64_t r = 0; r < B; ++r) act_mul_row(gp + r * 2 * I, gp + r * 2 * I + I, I, false, ap + r * I);
      x.add_(L.down(act));
    }
    auto out = torch::empty({B, H}, x.options());
    norm_rows(x, norm_, norm_eps_, out);
    return out;
  }

 private:
  // cache rows C + r <- RoPE(k heads of row r) (qwen3: normed per head first), v heads of row r
  void write_kv(const DraftLayer& L, const torch::Tensor& kv, const torch::Tensor& cos, const torch::Tensor& sin,
                int64_t C, torch::Tensor& kb, torch::Tensor& vb) const {
    const int64_t R = kv.size(0), g = g_, h = h_, d = d_, ks = kb.stride(0), vs = vb.stride(0);
    const float *src = kv.data_ptr<float>(), *cp = cos.data_ptr<float>(), *sp = sin.data_ptr<float>();
    const float* norm = L.qk_norm.numel() ? L.qk_norm.data_ptr<float>() + h * d : nullptr;  // k's weight
    float *kp = kb.data_ptr<float>(), *vp = vb.data_ptr<float>();
    std::vector<float> tmp(d);
    for (int64_t r = 0; r < R; ++r) {
      const float* row = src + r * 2 * g * d;
      for (int64_t j = 0; j < g; ++j) {
        const float* x = row + j * d;
        if (norm) {
          rms_norm_row(x, norm + j * d, d, L.qk_eps, tmp.data());
          x = tmp.data();
        }
        rope_row(x, cp + r * d, sp + r * d, d, kp + j * ks + (C + r) * d);
        std::memcpy(vp + j * vs + (C + r) * d, row + (g + j) * d, d * sizeof(float));
      }
    }
  }

  // q [B, h, d] <- RoPE(q heads of block row r) at the row's position (cos/sin row k + r; qwen3: normed per head first)
  void rotate_q(const DraftLayer& L, const torch::Tensor& qs, const torch::Tensor& cos, const torch::Tensor& sin,
                int64_t k, torch::Tensor& q) const {
    const int64_t B = qs.size(0), h = h_, d = d_;
    const float *src = qs.data_ptr<float>(), *cp = cos.data_ptr<float>(), *sp = sin.data_ptr<float>();
    const float* norm = L.qk_norm.numel() ? L.qk_norm.data_ptr<float>() : nullptr;
    float* qp = q.data_ptr<float>();
    std::vector<float> tmp(d);
    for (int64_t r = 0; r < B; ++r)
      for (int64_t head = 0; head < h; ++head) {
        const float* x = src + (r * h + head) * d;
        if (norm) {
          rms_norm_row(x, norm + head * d, d, L.qk_eps, tmp.data());
          x = tmp.data();
        }
        rope_row(x, cp + (k + r) * d, sp + (k + r) * d, d, qp + (r * h + head) * d);
      }
  }

  Linear fc_;
  torch::Tensor hidden_norm_, norm_;
  float hidden_eps_, norm_eps_;
  int64_t h_, g_, d_;
  double scale_;
  std::vector<DraftLayer> layers_;
};

void register_draft_layers(pybind11::module_& m) {
  // module_local: tests build this source a second time (another ISA) into a second module of the same process
  pybind11::class_<DraftLayers>(m, "DraftLayers", pybind11::module_local())
      .def(pybind11::init<std::vector<torch::Tensor>, std::vector<int64_t>, torch::Tensor, double, torch::Tensor,
                          double, std::vector<torch::Tensor>, std::vector<int64_t>, std::vector<double>, int64_t,
                          int64_t, int64_t, double>())
      .def("forward", &DraftLayers::forward, pybind11::call_guard<pybind11::gil_scoped_release>());
}
