// The decoder layers of a Llama- or Gemma-shaped model (caddtree/lean.py's LeanForward) in one C++ call, for the 1-96
// rows of a plain step or a tree verify, CPU, fp32. Built with panel_linear.cpp into one extension by
// caddtree/kernels.py.
//
// Why: at one token per step the Python layer loop's ~25 PyTorch calls per layer (norms, RoPE, cache writes, silu,
// residuals and the wrappers around the kernels) cost ~4 ms of a ~15 ms SmolLM2-135M step: dispatch, not arithmetic.
// Here those steps are loops over each row's own data, and the linears (quant_linear, panel_linear) and attention
// (row_attention) are called directly.
//
// One layer, row by row, HF's Llama arithmetic:
//   a = w1 · x / sqrt(mean(x²) + eps1);  [q | k | v] = a Wqkv^T (+ b);  qwen3, gemma3: q, k RMS-normed per head;
//   q, k = RoPE(q), RoPE(k) (rotate-half, cos/sin [n, d] from the model's rotary_emb);  k, v -> cache rows ctx .. ctx+n-1;
//   x += attention(q, cache) Wo^T;  a = w2 · x / sqrt(mean(x²) + eps2);  [g | u] = a Wgu^T;  x += (silu(g) · u) Wd^T.
// Gemma2/3 (the norm weights arrive as 1 + w): the attention's and the MLP's outputs are RMS-normed before their
// residual adds (post_attn, post_ff), gelu-tanh replaces silu, the scores may be soft-capped (Gemma2) and each layer
// reads the cos/sin of its own kind (Gemma3: local and global RoPE bases).
//
// Invariant (exactness): every step here reads one row's own data and runs the same instructions for every row
// (16-lane vectors over the features, a fixed tail, fixed horizontal sums), and the linears and attention are the
// batch-invariant kernels, so a row's result does not depend on how many rows the call carries: a plain step and a tree
// verify give the same bits. They are not PyTorch's bits (F.rms_norm and F.silu round differently in the last place):
// lean.py's Python loop, which runs the rows this does not take (prefill), agrees with it to fp32 rounding, and the
// KV rows a prefill writes are only read, never compared.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

#include "layer_ops.h"

namespace {

using namespace layer_ops;

struct Layer {
  torch::Tensor ln1, ln2, qk_norm;  // [H], [H]; qwen3: [h + g, d] (q's weight on q heads, k's on k heads), else empty
  torch::Tensor post_attn, post_ff;  // gemma: [H] each (the norms of the attention's and the MLP's outputs), else empty
  float eps1, eps2, qk_eps, eps3, eps4;
  Linear qkv, o, gate_up, down;
  int64_t inter;  // I: gate_up's output is [g | u], I columns each
  bool gelu;      // gelu-tanh(g) · u, else silu(g) · u
  int64_t rope;   // which cos/sin this layer reads (gemma3: one per layer kind), else 0
  bool sliding;   // attends through the sliding-window mask
};

}  // namespace

class LeanLayers {
 public:
  // Per layer, in order: tensors (13) ln1, qkv weights, qkv bias, qk_norm, o weights, o bias, ln2, gate_up weights,
  // gate_up bias, down weights, down bias, post_attn, post_ff (an empty tensor for none); ints (11) kind and arg of
  // qkv, o, gate_up, down, then I, gelu (1) or silu (0), the rope index; floats (5) eps1, eps2, qk_eps, eps3
  // (post_attn), eps4 (post_ff); sliding (1): whether the layer attends through the sliding-window mask. softcap: the
  // attention scores' soft cap (Gemma2), 0 for none.
  LeanLayers(std::vector<torch::Tensor> t, std::vector<int64_t> ints, std::vector<double> floats,
             std::vector<int64_t> sliding, int64_t h, int64_t g, int64_t d, double scale, double softcap)
      : h_(h), g_(g), d_(d), scale_(scale), softcap_(softcap) {
    const size_t count = t.size() / 13;
    TORCH_CHECK(t.size() == count * 13 && ints.size() == count * 11 && floats.size() == count * 5 &&
                    sliding.size() == count,
                "LeanLayers: 13 tensors, 11 ints, 5 floats and 1 sliding flag per layer");
    TORCH_CHECK(d % W == 0 && h % g == 0, "LeanLayers: head_dim a multiple of 16, heads a multiple of KV heads");
    for (size_t i = 0; i < count; ++i) {
      const torch::Tensor* a = &t[13 * i];
      const int64_t* k = &ints[11 * i];
      const double* f = &floats[5 * i];
      for (int j = 0; j < 13; ++j)
        TORCH_CHECK(!a[j].numel() || (a[j].is_contiguous() && a[j].device().is_cpu()), "LeanLayers: CPU tensors");
      Layer L;
      L.ln1 = a[0], L.qk_norm = a[3], L.ln2 = a[6], L.post_attn = a[11], L.post_ff = a[12];
      L.qkv = {a[1], a[2], k[0], k[1]};
      L.o = {a[4], a[5], k[2], k[3]};
      L.gate_up = {a[7], a[8], k[4], k[5]};
      L.down = {a[9], a[10], k[6], k[7]};
      L.inter = k[8], L.gelu = k[9] != 0, L.rope = k[10];
      L.eps1 = float(f[0]), L.eps2 = float(f[1]), L.qk_eps = float(f[2]), L.eps3 = float(f[3]), L.eps4 = float(f[4]);
      L.sliding = sliding[i] != 0;
      layers_.push_back(L);
    }
  }

  // Whether every layer's cache (keys[i], values[i]: [1, g, ctx, d] views) is the first ctx rows of its buffer
  // (k_bufs[i], v_bufs[i]: [1, g, capacity, d], undefined before the first step) with room for n more rows: then
  // `forward` can write the rows in place, else GrowingLayer.reserve must grow or re-point the buffers first. One call
  // for every layer: the same test per layer in Python cost ~0.1 ms a step, its data cache-cold after the weights.
  using Tensors = std::vector<c10::optional<torch::Tensor>>;  // None: a layer not initialised yet
  bool has_room(const Tensors& keys, const Tensors& values, const Tensors& k_bufs, const Tensors& v_bufs, int64_t ctx,
                int64_t n) const {
    if (keys.size() != layers_.size() || values.size() != keys.size() || k_bufs.size() != keys.size() ||
        v_bufs.size() != keys.size())
      return false;
    auto prefix = [&](const c10::optional<torch::Tensor>& view, const c10::optional<torch::Tensor>& buf) {
      return view.has_value() && buf.has_value() && view->dim() == 4 && buf->dim() == 4 && view->size(2) == ctx &&
             buf->size(2) >= ctx + n && view->data_ptr() == buf->data_ptr() && view->strides() == buf->strides();
    };
    for (size_t i = 0; i < keys.size(); ++i)
      if (!prefix(keys[i], k_bufs[i]) || !prefix(values[i], v_bufs[i])) return false;
    return true;
  }

  // x [n, H] (embedded tokens; not modified), cos/sin [R, n, d] (one per rope index), k_bufs/v_bufs per layer
  // [1, g, capacity, d] whose first ctx rows are the cache (rows ctx .. ctx + n - 1 are written here), allowed
  // [n, ctx + n] bool or empty (causal) for full-attention layers, allowed_sliding the same for sliding-window layers
  // (the window already applied), want: layer ids whose outputs are returned -> [x after the last layer, one [n, H]
  // per entry of want, then each layer's new cache views [1, g, ctx + n, d]: the keys of every layer, then the values].
  std::vector<torch::Tensor> forward(torch::Tensor x, torch::Tensor cos, torch::Tensor sin,
                                     std::vector<torch::Tensor> k_bufs, std::vector<torch::Tensor> v_bufs, int64_t ctx,
                                     torch::Tensor allowed, torch::Tensor allowed_sliding, std::vector<int64_t> want) {
    const int64_t n = x.size(0), H = x.size(1), h = h_, g = g_, d = d_;
    TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat && cos.sizes() == sin.sizes() && cos.dim() == 3 &&
                    cos.size(1) == n && cos.size(2) == d && cos.is_contiguous() && sin.is_contiguous(),
                "LeanLayers.forward: x [n, H] fp32, cos and sin [R, n, d] contiguous");
    for (const Layer& L : layers_) TORCH_CHECK(L.rope < cos.size(0), "LeanLayers.forward: a cos/sin per rope index");
    TORCH_CHECK(k_bufs.size() == layers_.size() && v_bufs.size() == layers_.size(), "one k and v buffer per layer");
    const size_t F = 1 + want.size(), Ls = layers_.size();
    std::vector<torch::Tensor> out(F + 2 * Ls);
    x = x.clone(at::MemoryFormat::Contiguous);
    auto a = torch::empty({n, H}, x.options());     // a normed input
    auto q = torch::empty({n, h, d}, x.options());  // RoPE'd queries
    for (size_t i = 0; i < layers_.size(); ++i) {
      const Layer& L = layers_[i];
      norm_rows(x, L.ln1, L.eps1, a);
      const auto qkv = timed(linear_s_, [&] { return L.qkv(a); });  // [n, (h + 2g) d]
      auto kb = k_bufs[i].select(0, 0), vb = v_bufs[i].select(0, 0);  // [g, capacity, d]
      TORCH_CHECK(kb.sizes() == vb.sizes() && kb.size(0) == g && kb.size(1) >= ctx + n && kb.size(2) == d &&
                      kb.stride(2) == 1 && kb.stride(1) == d && vb.stride(2) == 1 && vb.stride(1) == d,
                  "layer ", i, ": k and v buffers [1, g, >= ctx + n, d] with contiguous rows");
      write_qkv(L, qkv, cos.select(0, L.rope), sin.select(0, L.rope), ctx, q, kb, vb);
      const auto att = timed(attention_s_, [&] {
        return row_attention(q, kb.narrow(1, 0, ctx + n), vb.narrow(1, 0, ctx + n),
                             L.sliding ? allowed_sliding : allowed, scale_, softcap_);
      });
      auto y = timed(linear_s_, [&] { return L.o(att.view({n, h * d})); });  // [n, H]
      if (L.post_attn.numel()) norm_rows(y, L.post_attn, L.eps3, y);  // in place: each element read before written
      x.add_(y);
      norm_rows(x, L.ln2, L.eps2, a);
      const auto gu = timed(linear_s_, [&] { return L.gate_up(a); });  // [n, 2I]
      auto act = torch::empty({n, L.inter}, x.options());
      const float* gp = gu.data_ptr<float>();
      float* ap = act.data_ptr<float>();
      const int64_t I = L.inter;
      at::parallel_for(0, n, ROW_GRAIN, [&](int64_t i0, int64_t i1) {
        for (int64_t r = i0; r < i1; ++r) act_mul_row(gp + r * 2 * I, gp + r * 2 * I + I, I, L.gelu, ap + r * I);
      });
      auto z = timed(linear_s_, [&] { return L.down(act); });  // [n, H]
      if (L.post_ff.numel()) norm_rows(z, L.post_ff, L.eps4, z);
      x.add_(z);
      for (size_t j = 0; j < want.size(); ++j)
        if (want[j] == int64_t(i)) out[1 + j] = x.clone();
    }
    out[0] = x;
    for (size_t i = 0; i < Ls; ++i) {  // the cache's new views, its first ctx + n rows
      out[F + i] = k_bufs[i].narrow(2, 0, ctx + n);
      out[F + Ls + i] = v_bufs[i].narrow(2, 0, ctx + n);
    }
    return out;
  }

  // seconds spent since the last call [in the linears, in attention], then reset: what scripts/step_profile.py
  // reports for this path (the kernels are called from here, not from Python)
  std::vector<double> take_times() {
    std::vector<double> t{linear_s_, attention_s_};
    linear_s_ = attention_s_ = 0.0;
    return t;
  }

 private:
  // q [n, h, d] <- RoPE(q heads); cache rows ctx + r <- RoPE(k heads), v heads (qwen3: q and k RMS-normed first)
  void write_qkv(const Layer& L, const torch::Tensor& qkv, const torch::Tensor& cos, const torch::Tensor& sin,
                 int64_t ctx, torch::Tensor& q, torch::Tensor& kb, torch::Tensor& vb) const {
    const int64_t n = qkv.size(0), h = h_, g = g_, d = d_, ks = kb.stride(0), vs = vb.stride(0);
    const float *src = qkv.data_ptr<float>(), *cp = cos.data_ptr<float>(), *sp = sin.data_ptr<float>();
    const float* norm = L.qk_norm.numel() ? L.qk_norm.data_ptr<float>() : nullptr;
    float *qp = q.data_ptr<float>(), *kp = kb.data_ptr<float>(), *vp = vb.data_ptr<float>();
    at::parallel_for(0, n, ROW_GRAIN, [&](int64_t i0, int64_t i1) {
      std::vector<float> tmp(d);
      for (int64_t r = i0; r < i1; ++r) {
        const float* row = src + r * (h + 2 * g) * d;
        for (int64_t head = 0; head < h + g; ++head) {
          const float* x = row + head * d;
          if (norm) {
            rms_norm_row(x, norm + head * d, d, L.qk_eps, tmp.data());
            x = tmp.data();
          }
          float* dst = head < h ? qp + (r * h + head) * d : kp + (head - h) * ks + (ctx + r) * d;
          rope_row(x, cp + r * d, sp + r * d, d, dst);
        }
        for (int64_t j = 0; j < g; ++j)
          std::memcpy(vp + j * vs + (ctx + r) * d, row + (h + g + j) * d, d * sizeof(float));
      }
    });
  }

  using Clock = std::chrono::steady_clock;
  static double seconds(Clock::duration t) { return std::chrono::duration<double>(t).count(); }
  template <typename F>
  static torch::Tensor timed(double& into, F&& f) {
    const auto t0 = Clock::now();
    auto y = f();
    into += seconds(Clock::now() - t0);
    return y;
  }

  int64_t h_, g_, d_;
  double scale_, softcap_, linear_s_ = 0.0, attention_s_ = 0.0;
  std::vector<Layer> layers_;
};

void register_lean_layers(pybind11::module_& m) {
  // module_local: tests build this source a second time (another ISA) into a second module of the same process
  pybind11::class_<LeanLayers>(m, "LeanLayers", pybind11::module_local())
      .def(pybind11::init<std::vector<torch::Tensor>, std::vector<int64_t>, std::vector<double>,
                          std::vector<int64_t>, int64_t, int64_t, int64_t, double, double>())
      .def("forward", &LeanLayers::forward, pybind11::call_guard<pybind11::gil_scoped_release>())
      .def("has_room", &LeanLayers::has_room)
      .def("take_times", &LeanLayers::take_times);
}
