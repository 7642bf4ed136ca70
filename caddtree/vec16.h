// 16-float vectors shared by attention.cpp and lean_layers.cpp: the same code on every CPU (one zmm with AVX-512, two
// ymm with AVX2), each lane computed by the same instructions whatever the row, so results depend on a row's own data
// only (batch invariance).
#pragma once

#include <cstdint>
#include <cstring>

namespace vec16 {

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

}  // namespace vec16
