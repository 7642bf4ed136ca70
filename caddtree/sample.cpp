// One draw from the target's processed law (temperature, then top-k, then top-p) in one call over the vocabulary.
// Built with panel_linear.cpp into one extension by caddtree/kernels.py; accept.sample_token is the reference.
//
// Why: a draw in PyTorch ops (max, scale, logsumexp, a growing top-k for the nucleus, cumsum, searchsorted) took
// ~0.9 ms per token on the project's AMD CPU right after a verify forward, with the caches cold (0.3 ms warm): ~10%
// of a plain step at T = 1, paid by every sampled method. Here: the max; z = (x - max) / T; top-k's k-th value
// (ties kept); weights e = exp(z) (vec16's polynomial, ~1 ulp; 0 where z < -87 or masked); their sum s in double;
// top-p keeps the smallest set of largest weights whose mass reaches p·s, plus every token tied with its least one:
// a token is kept when the mass of the tokens before it (descending z) is < p·s, as `accept.target_probs` decides on
// its sorted cumulative sums. Only tokens weighing at least (1 - p) s / (2V) can be kept (`nucleus`); those are
// bucketed by z (0.25 wide), and only the bucket where the mass crosses p·s is sorted. The draw: the first kept
// token whose cumulative weight exceeds u times the kept total (a fixed order; any order gives the same law).
// Measured (SmolLM2 logits, T = 1, top-p 0.95, caches swept before each call): 0.24 ms where the PyTorch ops took 0.73.
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "vec16.h"

namespace {

using namespace vec16;

constexpr int BUCKETS = 512;       // z in (-128, 0] by quarters; lower z share the last bucket
constexpr float BUCKET_SCALE = 4.0f;

struct Law {
  std::vector<int64_t> tokens;   // the kept tokens: buckets above the crossing one (any order), then it, sorted
  std::vector<double> weights;   // their unnormalised weights exp(z)
};

inline int bucket_of(float z) {
  const float b = -z * BUCKET_SCALE;
  return b >= float(BUCKETS - 1) ? BUCKETS - 1 : int(b);
}

// logits [V] -> weights e [V] (0 where masked) in `e`, z in `z`, and their sum s (see the file's header)
double weigh(const torch::Tensor& logits, double temperature, int64_t top_k, std::vector<float>& z,
             std::vector<float>& e) {
  TORCH_CHECK(logits.dim() == 1 && logits.scalar_type() == torch::kFloat && logits.is_contiguous() &&
              logits.device().is_cpu(), "logits: a contiguous fp32 CPU vector");
  TORCH_CHECK(temperature > 0.0, "temperature must be > 0 (greedy draws are argmaxes)");
  const int64_t V = logits.size(0), Vp = (V + W - 1) / W * W;
  TORCH_CHECK(V > 0, "empty logits");
  const float ninf = -std::numeric_limits<float>::infinity();
  z.assign(Vp, ninf);  // padding: weight 0
  e.resize(Vp);
  std::memcpy(z.data(), logits.data_ptr<float>(), V * sizeof(float));
  v16 mv = v16{} + ninf;
  for (int64_t c = 0; c < Vp; c += W) {
    const v16 v = load(z.data() + c);
    mv = v > mv ? v : mv;
  }
  float mx = ninf;
  for (int l = 0; l < W; ++l) mx = std::max(mx, mv[l]);
  TORCH_CHECK(std::isfinite(mx), "logits have no finite maximum (NaN or all infinite)");
  const v16 m = v16{} + mx, T = v16{} + float(temperature), lo = v16{} - 87.0f;
  if (float(temperature) > 0.0f) {
    for (int64_t c = 0; c < Vp; c += W) store(z.data() + c, (load(z.data() + c) - m) / T);
  } else {  // T below fp32's least positive value: the law is its limit, the maxima uniformly (no 0 / 0)
    for (int64_t i = 0; i < Vp; ++i) z[i] = z[i] == mx ? 0.0f : ninf;
  }
  if (top_k > 0 && top_k < V) {  // top-k: below the k-th largest z (ties kept) -> -inf
    thread_local std::vector<float> tmp;
    tmp.assign(z.begin(), z.begin() + V);
    std::nth_element(tmp.begin(), tmp.begin() + (top_k - 1), tmp.end(), std::greater<float>());
    const float kth = tmp[top_k - 1];
    for (int64_t i = 0; i < V; ++i)
      if (z[i] < kth) z[i] = ninf;
  }
  double s = 0.0;
  for (int64_t c = 0; c < Vp; c += W) {
    const v16 zv = load(z.data() + c);
    const v16 ev = zv > lo ? exp_nonpositive(zv) : v16{};
    store(e.data() + c, ev);
    s += sum(ev);
  }
  return s;
}

// the kept tokens of top-p < 1 and their weights: the buckets above the crossing one (any order), then it, sorted
Law nucleus(int64_t V, double top_p, double s, const std::vector<float>& z, const std::vector<float>& e) {
  // a token of weight below eps is never kept: all of them weigh at most (1 - p) s / 2, so the tokens above reach
  // p·s first, and the least kept token (and its ties) weigh at least eps
  const float eps = float(0.5 * (1.0 - top_p) * s / double(V));
  thread_local std::vector<int64_t> cand;
  cand.clear();
  for (int64_t i = 0; i < V; ++i)
    if (e[i] >= eps && e[i] > 0.0f) cand.push_back(i);
  double mass[BUCKETS] = {0.0};
  for (int64_t i : cand) mass[bucket_of(z[i])] += e[i];
  const double target = top_p * s;
  double before = 0.0;  // mass of the buckets above the crossing one
  int cross = 0;
  while (cross < BUCKETS - 1 && before + mass[cross] < target) before += mass[cross++];
  Law law;
  std::vector<std::pair<float, int64_t>> edge;  // the crossing bucket's tokens, sorted below
  for (int64_t i : cand) {
    const int b = bucket_of(z[i]);
    if (b < cross) { law.tokens.push_back(i); law.weights.push_back(e[i]); }
    else if (b == cross) edge.emplace_back(z[i], i);
  }
  // descending z, ties by token id (any fixed order: tied tokens are all kept or all dropped)
  std::sort(edge.begin(), edge.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  float least = 0.0f;
  size_t j = 0;
  for (; j < edge.size() && before < target; ++j) {  // kept while the mass before it is < p·s
    const double w = e[edge[j].second];
    law.tokens.push_back(edge[j].second);
    law.weights.push_back(w);
    before += w;
    least = edge[j].first;
  }
  for (; j < edge.size() && edge[j].first == least; ++j) {  // and every token tied with the least kept one
    law.tokens.push_back(edge[j].second);
    law.weights.push_back(e[edge[j].second]);
  }
  return law;
}

Law processed(const torch::Tensor& logits, double temperature, int64_t top_k, double top_p) {
  thread_local std::vector<float> z, e;
  const double s = weigh(logits, temperature, top_k, z, e);
  const int64_t V = logits.size(0);
  if (top_p < 1.0) return nucleus(V, top_p, s, z, e);
  Law law;
  for (int64_t i = 0; i < V; ++i)
    if (e[i] > 0.0f) { law.tokens.push_back(i); law.weights.push_back(e[i]); }
  return law;
}

}  // namespace

// one draw: the first kept token whose cumulative weight exceeds u · (kept total), u in [0, 1)
int64_t sample_processed(const torch::Tensor& logits, double temperature, int64_t top_k, double top_p, double u) {
  thread_local std::vector<float> z, e;
  const double s = weigh(logits, temperature, top_k, z, e);
  const int64_t V = logits.size(0);
  if (top_p >= 1.0) {  // every token: find the 16-token block where u·s falls, then the token in it
    const double target = u * s;
    double cum = 0.0;
    int64_t last = -1;
    for (int64_t c = 0; c < V; c += W) {
      const double block = sum(load(e.data() + c));
      if (cum + block <= target) { cum += block; continue; }
      for (int64_t i = c; i < std::min(c + W, V); ++i) {
        if (e[i] <= 0.0f) continue;
        last = i;
        cum += e[i];
        if (cum > target) return i;
      }
    }
    if (last >= 0) return last;  // u·s past the summed weights by rounding: the last token with a weight
    for (int64_t i = V - 1; i >= 0; --i)
      if (e[i] > 0.0f) return i;
    return int64_t(std::max_element(z.begin(), z.begin() + V) - z.begin());  // unreachable: the max weighs 1
  }
  const Law law = nucleus(V, top_p, s, z, e);
  double total = 0.0;
  for (double w : law.weights) total += w;
  const double target = u * total;
  double cum = 0.0;
  for (size_t j = 0; j < law.tokens.size(); ++j) {
    cum += law.weights[j];
    if (cum > target) return law.tokens[j];
  }
  return law.tokens.empty() ? int64_t(std::max_element(z.begin(), z.begin() + V) - z.begin()) : law.tokens.back();
}

// logits [R, V] fp32 -> [R] int64: each row's greedy choice as torch.argmax picks it, the first maximal entry, a NaN
// counting as above every number (its first NaN). Why: `vocab.argmax`'s few tensor ops took ~0.13 ms a round right
// after a verify (caches cold; ~0.02 warm), 1.7% of a plain step on the AMD EPYC; here one pass finds each row's
// maximum (and whether it holds a NaN), a second the first entry equal to it.
torch::Tensor row_argmax(const torch::Tensor& logits) {
  TORCH_CHECK(logits.dim() == 2 && logits.scalar_type() == torch::kFloat && logits.is_contiguous() &&
              logits.device().is_cpu(), "logits: a contiguous [R, V] fp32 CPU tensor");
  const int64_t R = logits.size(0), V = logits.size(1), full = V / W * W;
  TORCH_CHECK(V > 0, "empty logits");
  auto out = torch::empty({R}, torch::kLong);
  int64_t* o = out.data_ptr<int64_t>();
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < R; ++r) {
    const float* x = logits.data_ptr<float>() + r * V;
    v16 mv = v16{} + ninf;
    i16 nan = i16{};
    for (int64_t c = 0; c < full; c += W) {
      const v16 v = load(x + c);
      mv = v > mv ? v : mv;
      nan |= v != v;
    }
    float mx = ninf;
    bool has_nan = false;
    for (int l = 0; l < W; ++l) {
      mx = std::max(mx, mv[l]);
      has_nan |= nan[l] != 0;
    }
    for (int64_t i = full; i < V; ++i) {
      mx = x[i] > mx ? x[i] : mx;
      has_nan |= std::isnan(x[i]);
    }
    int64_t at = 0;
    if (has_nan) {
      while (!std::isnan(x[at])) ++at;
    } else {
      while (x[at] != mx) ++at;  // the first maximal entry (-0.0 == 0.0, as torch compares)
    }
    o[r] = at;
  }
  return out;
}

// the kept tokens and their probabilities (normalised over the kept set): what sample_processed draws from
std::tuple<torch::Tensor, torch::Tensor> processed_law(const torch::Tensor& logits, double temperature,
                                                       int64_t top_k, double top_p) {
  const Law law = processed(logits, temperature, top_k, top_p);
  auto tokens = torch::tensor(law.tokens, torch::kLong);
  auto probs = torch::tensor(law.weights, torch::kDouble);
  return {tokens, probs / probs.sum()};
}
