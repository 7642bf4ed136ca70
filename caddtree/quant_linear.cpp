// y = x @ W^T with W as a GGUF file stores it (ggml blocks of 32 weights along K), fp32 activations and sums, CPU.
// Built with panel_linear.cpp into one extension by caddtree/kernels.py.
//
// Block types (ggml's, bytes per 32 weights): Q4_0 (18: fp16 d, 16 B of nibbles; w = d·(q - 8)), Q4_1 (20: fp16 d,
// fp16 m, nibbles; w = d·q + m), Q8_0 (34: fp16 d, int8 q[32]; w = d·q), F16 and BF16 (64: the weights themselves;
// an fp16 or bf16 model's own weight rows, as caddtree.kernels.pack_linears passes them). Element j < 16 of a 4-bit
// block is the low nibble of byte j, element j + 16 its high nibble. d·q is exact in fp32 and d·q + m is rounded once
// (an FMA), as gguf-py's dequantize computes it, so the weights used here equal the fp32 model's bit for bit.
//
// Scheme: the weights are split into strips of R rows, each strip belonging to one thread. With AVX-512 the blocks
// are dequantized in registers and multiplied straight away (`fused_strip`): up to 4 input rows against all R weight
// rows, more in groups of up to 8 input rows against 2 weight rows (so 9+ rows dequantize each block once per group;
// still faster than a buffer at 5-96 rows). Otherwise (AVX2, scalar; and Q8_0 at 1-3 rows) a thread dequantizes one
// strip into an fp32 buffer it owns ([R, K], L1/L2-resident), then multiplies every input row against it, G rows at
// a time with R x G vector accumulators (lanes over k), summed horizontally at the end. Either way each weight byte
// is read from memory once per call.
//
// Invariant (exactness): y[m, n] is accumulated lane-wise over k in order, then reduced by one fixed horizontal sum;
// nothing depends on M, on which group row m falls in, or on the thread count (a strip belongs to one thread), so a
// row's result is bit-identical whether it is multiplied alone (plain decoding) or among 96 (tree verification).
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace {

// ggml type ids, and the two 4-bit layouts the kernel runs (`quant_repack`): each block's fp16 scales stored as fp32
// ahead of its nibbles (Q4_0S: d, 16 B = 20 bytes; Q4_1S: d, m, 16 B = 24 bytes). Why: building a block's table from
// fp16 scales (a load, a conversion, two broadcasts) cost as many instructions as the rest of a plain step's block;
// from fp32 in memory the broadcasts are plain loads. The values, hence every result, are the same.
// The layouts the other GGUF types become at load (caddtree/gguf_weights.py), whose weights are d·q + m with d·q
// exact in fp32: Q5_0S (24 bytes: fp32 d, the low nibbles as Q4_0's, a uint32 of the 32 high bits; w = d·(q - 16))
// and Q5_1S (28: d, m, then the same; w = fma(q, d, m)) for Q5_0, Q5_1 and Q5_K, looked up in a 32-entry table;
// Q8S (48: fp32 d_lo, d_hi, m_lo, m_hi, int8 q[32]; w = fma(q, d, m), elements 0..15 with the _lo pair) for Q6_K
// and for fused projections whose parts differ in type.
enum Type : int64_t {
  F16 = 1, Q4_0 = 2, Q4_1 = 3, Q8_0 = 8, BF16 = 30, Q4_0S = 102, Q4_1S = 103, Q5_0S = 106, Q5_1S = 107, Q8S = 108
};
constexpr int64_t QK = 32;                                        // weights per block

constexpr int64_t block_bytes(int64_t type) {
  switch (type) {
    case F16: return 64;
    case BF16: return 64;
    case Q4_0: return 18;
    case Q4_1: return 20;
    case Q8_0: return 34;
    case Q4_0S: return 20;
    case Q4_1S: return 24;
    case Q5_0S: return 24;
    case Q5_1S: return 28;
    case Q8S: return 48;
    default: return -1;
  }
}

inline float half_to_float(const uint8_t* p) {  // IEEE binary16 -> fp32 (exact)
  uint16_t h;
  std::memcpy(&h, p, 2);
  const uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
  uint32_t u;
  if (exp == 0x1F) {
    u = sign | 0x7F800000 | (man << 13);
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    u = sign;
  } else {  // subnormal: normalise
    int e = -1;
    uint32_t m = man;
    do { ++e; m <<= 1; } while (!(m & 0x400));
    u = sign | ((112 - e) << 23) | ((m & 0x3FF) << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

#if defined(__F16C__)
// where the CPU has F16C (every AVX2/AVX-512 x86). Loaded with a zeroing vmovd: _cvtsh_ss compiles to a vpinsrw that
// merges into the previous value's register, a false dependency that chained every block's scale conversion (~3x
// slower plain steps, seen with perf)
inline float fp16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(int32_t(h))));
}
inline __m128 fp16x2(const uint8_t* p) {  // [fp16 at p, fp16 at p + 2, 0, 0]
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm_cvtph_ps(_mm_cvtsi32_si128(v));
}
#else
inline float fp16(const uint8_t* p) { return half_to_float(p); }
#endif

inline float f32(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}

// the 4- and 5-bit layouts, said once for every ISA below: which ones, whether w = d·q + m (else d·(q - 8) or
// d·(q - 16)), where the nibbles start (the 5-bit types' high bits follow them), and the block's scales d and m as fp32
constexpr bool is_q4(int64_t type) { return type == Q4_0 || type == Q4_1 || type == Q4_0S || type == Q4_1S; }
constexpr bool has_min(int64_t type) { return type == Q4_1 || type == Q4_1S || type == Q5_1S; }
constexpr bool is_q5(int64_t type) { return type == Q5_0S || type == Q5_1S; }
inline uint32_t u32(const uint8_t* p) {
  uint32_t u;
  std::memcpy(&u, p, 4);
  return u;
}
constexpr int64_t nibble_offset(int64_t type) { return type == Q4_0 ? 2 : type == Q4_1S || type == Q5_1S ? 8 : 4; }
template <int64_t type>
inline float q4_d(const uint8_t* b) { return type == Q4_0 || type == Q4_1 ? fp16(b) : f32(b); }
template <int64_t type>
inline float q4_m(const uint8_t* b) { return type == Q4_1 ? fp16(b + 2) : f32(b + 4); }

// ---------------------------------------------------------------------------------------- dequantize one block
// out[0:32] = the block's 32 weights in fp32
#if defined(__AVX512F__)
// lo, hi = weights 0..15 and 16..31 of one block, in registers. 4-bit types: the block's 16 possible values
// d·[0..15] + m (one FMA) looked up by nibble with one permute each (vpermps reads the low 4 bits of each index).
template <int64_t type>
inline void dequant_regs(const uint8_t* b, __m512& lo, __m512& hi) {
  if constexpr (is_q4(type)) {
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512 table;
    if constexpr (type == Q4_1) {
      const __m128 dm = fp16x2(b);  // [d, m]
      table = _mm512_fmadd_ps(iota, _mm512_broadcastss_ps(dm), _mm512_broadcastss_ps(_mm_movehdup_ps(dm)));  // d·q + m
    } else if constexpr (type == Q4_1S) {
      table = _mm512_fmadd_ps(iota, _mm512_set1_ps(q4_d<type>(b)), _mm512_set1_ps(q4_m<type>(b)));
    } else {
      table = _mm512_mul_ps(_mm512_sub_ps(iota, _mm512_set1_ps(8.0f)), _mm512_set1_ps(q4_d<type>(b)));  // exact
    }
    const __m512i v =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + nibble_offset(type))));
    lo = _mm512_permutexvar_ps(v, table);
    hi = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table);
  } else if constexpr (type == Q8_0) {
    const __m512 D = _mm512_set1_ps(fp16(b));
    const __m128i* q = reinterpret_cast<const __m128i*>(b + 2);
    lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q))), D);
    hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q + 1))), D);
  } else if constexpr (is_q5(type)) {  // 32 values: two tables, one 2-source permute (its index's bits 0..4) each
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 D = _mm512_set1_ps(q4_d<type>(b)), sixteen = _mm512_set1_ps(16.0f);
    constexpr int64_t at = nibble_offset(type);
    __m512 t0, t1;
    if constexpr (has_min(type)) {
      const __m512 M = _mm512_set1_ps(q4_m<type>(b));
      t0 = _mm512_fmadd_ps(iota, D, M);
      t1 = _mm512_fmadd_ps(_mm512_add_ps(iota, sixteen), D, M);
    } else {  // d·(q - 16), exact
      t0 = _mm512_mul_ps(_mm512_sub_ps(iota, sixteen), D);
      t1 = _mm512_mul_ps(iota, D);
    }
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + at)));
    const uint32_t h = u32(b + at + 16);
    const __m512i i16 = _mm512_set1_epi32(16), il = _mm512_and_si512(v, _mm512_set1_epi32(15)),
                  ih = _mm512_srli_epi32(v, 4);
    lo = _mm512_permutex2var_ps(t0, _mm512_mask_or_epi32(il, __mmask16(h), il, i16), t1);
    hi = _mm512_permutex2var_ps(t0, _mm512_mask_or_epi32(ih, __mmask16(h >> 16), ih, i16), t1);
  } else if constexpr (type == Q8S) {
    const __m128i* q = reinterpret_cast<const __m128i*>(b + 16);
    lo = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q))), _mm512_set1_ps(f32(b)),
                         _mm512_set1_ps(f32(b + 8)));
    hi = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q + 1))), _mm512_set1_ps(f32(b + 4)),
                         _mm512_set1_ps(f32(b + 12)));
  } else if constexpr (type == BF16) {  // bf16 is fp32's upper half: widen, shift into place (exact)
    const __m256i* h = reinterpret_cast<const __m256i*>(b);
    lo = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(h)), 16));
    hi = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(h + 1)), 16));
  } else {  // F16
    const __m256i* h = reinterpret_cast<const __m256i*>(b);
    lo = _mm512_cvtph_ps(_mm256_loadu_si256(h));
    hi = _mm512_cvtph_ps(_mm256_loadu_si256(h + 1));
  }
}
template <int64_t type>
inline void dequant_block(const uint8_t* b, float* out) {
  __m512 lo, hi;
  dequant_regs<type>(b, lo, hi);
  _mm512_storeu_ps(out, lo);
  _mm512_storeu_ps(out + 16, hi);
}
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
template <int64_t type>
inline void dequant_block(const uint8_t* b, float* out) {
  if constexpr (is_q4(type) || is_q5(type)) {  // q = the nibble (and, 5-bit, its high bit); w = d·q + m or d·(q - o)
    const __m256 D = _mm256_set1_ps(q4_d<type>(b)), M = _mm256_set1_ps(has_min(type) ? q4_m<type>(b) : 0.0f);
    const __m256 offset = _mm256_set1_ps(is_q5(type) ? 16.0f : 8.0f);
    const uint8_t* qs = b + nibble_offset(type);
    const __m256i bits = _mm256_set1_epi32(is_q5(type) ? int(u32(qs + 16)) : 0), one = _mm256_set1_epi32(1);
    for (int h = 0; h < 2; ++h) {  // bytes 8h .. 8h+7 -> elements 8h.. (low nibbles) and 16+8h.. (high nibbles)
      const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8 * h)));
      __m256i ql = _mm256_and_si256(v, _mm256_set1_epi32(0xF)), qh = _mm256_srli_epi32(v, 4);
      if constexpr (is_q5(type)) {  // bit 4 of elements j and j + 16 from the high bits
        const __m256i j = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(8 * h));
        ql = _mm256_or_si256(ql, _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(bits, j), one), 4));
        qh = _mm256_or_si256(qh, _mm256_slli_epi32(_mm256_and_si256(
                                     _mm256_srlv_epi32(bits, _mm256_add_epi32(j, _mm256_set1_epi32(16))), one), 4));
      }
      const __m256 lo = _mm256_cvtepi32_ps(ql), hi = _mm256_cvtepi32_ps(qh);
      if constexpr (has_min(type)) {
        _mm256_storeu_ps(out + 8 * h, _mm256_fmadd_ps(lo, D, M));
        _mm256_storeu_ps(out + 16 + 8 * h, _mm256_fmadd_ps(hi, D, M));
      } else {
        _mm256_storeu_ps(out + 8 * h, _mm256_mul_ps(_mm256_sub_ps(lo, offset), D));
        _mm256_storeu_ps(out + 16 + 8 * h, _mm256_mul_ps(_mm256_sub_ps(hi, offset), D));
      }
    }
  } else if constexpr (type == Q8_0) {
    const __m256 D = _mm256_set1_ps(fp16(b));
    for (int h = 0; h < 4; ++h) {
      const __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + 8 * h)));
      _mm256_storeu_ps(out + 8 * h, _mm256_mul_ps(_mm256_cvtepi32_ps(v), D));
    }
  } else if constexpr (type == Q8S) {
    for (int h = 0; h < 4; ++h) {  // elements 8h..8h+7: the _lo scales for h < 2, the _hi ones after
      const __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 16 + 8 * h)));
      _mm256_storeu_ps(out + 8 * h, _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_set1_ps(f32(b + 4 * (h / 2))),
                                                    _mm256_set1_ps(f32(b + 8 + 4 * (h / 2)))));
    }
  } else if constexpr (type == BF16) {
    for (int h = 0; h < 4; ++h) {
      const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 16 * h)));
      _mm256_storeu_ps(out + 8 * h, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
    }
  } else {
    for (int h = 0; h < 4; ++h)
      _mm256_storeu_ps(out + 8 * h, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 16 * h))));
  }
}
#else
template <int64_t type>
inline void dequant_block(const uint8_t* b, float* out) {
  if constexpr (is_q4(type) || is_q5(type)) {
    const float d = q4_d<type>(b);
    const float m = has_min(type) ? q4_m<type>(b) : 0.0f;
    const uint8_t* qs = b + nibble_offset(type);
    const uint32_t h = is_q5(type) ? u32(qs + 16) : 0;  // bit 4 of each element (5-bit types)
    const int offset = is_q5(type) ? 16 : 8;
    for (int j = 0; j < 16; ++j) {
      const int lo = (qs[j] & 0xF) | int((h >> j) & 1) << 4, hi = (qs[j] >> 4) | int((h >> (j + 16)) & 1) << 4;
      out[j] = has_min(type) ? std::fma(float(lo), d, m) : float(lo - offset) * d;
      out[j + 16] = has_min(type) ? std::fma(float(hi), d, m) : float(hi - offset) * d;
    }
  } else if constexpr (type == Q8_0) {
    const float d = half_to_float(b);
    for (int j = 0; j < 32; ++j) out[j] = float(int8_t(b[2 + j])) * d;
  } else if constexpr (type == Q8S) {
    for (int j = 0; j < 32; ++j)
      out[j] = std::fma(float(int8_t(b[16 + j])), f32(b + 4 * (j / 16)), f32(b + 8 + 4 * (j / 16)));
  } else if constexpr (type == BF16) {
    for (int j = 0; j < 32; ++j) {
      uint16_t h;
      std::memcpy(&h, b + 2 * j, 2);
      const uint32_t u = uint32_t(h) << 16;
      std::memcpy(out + j, &u, 4);
    }
  } else {
    for (int j = 0; j < 32; ++j) out[j] = half_to_float(b + 2 * j);
  }
}
#endif

// Prefetch, spread over the block loop: while a row's blocks are read at b, the same place `ahead` bytes on (whole
// strips, at least PREFETCH_BYTES) is asked for, one cache line at a time (every 64 / block_bytes blocks, so no line
// is skipped). Why: with a burst of a whole strip's prefetches at each strip's start (the previous scheme) the kernel
// streamed from memory at half a plain read's rate on an Intel Xeon, and without prefetch no faster (our reading,
// with no counters on that VM: the burst holds the core's line-fill buffers at once); spread, the SmolLM2 body + head
// at 1 row took 7.1 ms instead of 11.3 (2 threads; docs/design.md). Prefetches never fault: asking past the tensor's
// end fetches lines nobody uses.
constexpr int64_t PREFETCH_BYTES = 6144;
inline int64_t prefetch_ahead(int64_t strip_bytes) {
  return (PREFETCH_BYTES + strip_bytes - 1) / strip_bytes * strip_bytes;
}
template <int64_t bb>
constexpr int64_t prefetch_every() { return bb >= 64 ? 1 : 64 / bb; }  // blocks per prefetched line
inline void prefetch_line(const uint8_t* p) {
#if defined(__AVX2__) || defined(__AVX512F__)
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
#endif
}

// out [K] = one weight row of nb blocks, dequantized (and the line `ahead` bytes on asked for, as the block loop goes)
template <int64_t type>
inline void dequant_blocks(const uint8_t* row, int64_t nb, int64_t ahead, float* out) {
  constexpr int64_t bb = block_bytes(type);
  for (int64_t b = 0; b < nb; ++b) {
    if (ahead > 0 && b % prefetch_every<bb>() == 0) prefetch_line(row + ahead + b * bb);
    dequant_block<type>(row + b * bb, out + b * QK);
  }
}
inline void dequant_row(int64_t type, const uint8_t* row, int64_t nb, int64_t ahead, float* out) {
  switch (type) {
    case Q4_0: dequant_blocks<Q4_0>(row, nb, ahead, out); break;
    case Q4_1: dequant_blocks<Q4_1>(row, nb, ahead, out); break;
    case Q8_0: dequant_blocks<Q8_0>(row, nb, ahead, out); break;
    case Q4_0S: dequant_blocks<Q4_0S>(row, nb, ahead, out); break;
    case Q4_1S: dequant_blocks<Q4_1S>(row, nb, ahead, out); break;
    case Q5_0S: dequant_blocks<Q5_0S>(row, nb, ahead, out); break;
    case Q5_1S: dequant_blocks<Q5_1S>(row, nb, ahead, out); break;
    case Q8S: dequant_blocks<Q8S>(row, nb, ahead, out); break;
    case BF16: dequant_blocks<BF16>(row, nb, ahead, out); break;
    default: dequant_blocks<F16>(row, nb, ahead, out); break;
  }
}

// ------------------------------------------------------------------------------ dot products against a strip
// y[m, n0 + r] for r < R, m in [m0, m0 + G): w [R, K] fp32 (the dequantized strip), x [M, K]
#if defined(__AVX512F__)
constexpr int R = 4, G_MAX = 6;  // 24 accumulators + 4 weights + 1 input of the 32 zmm registers
template <int G, int RR>
void strip_rows(const float* x, int64_t K, const float* w, float* y, int64_t N, int64_t m0, int64_t n0) {
  __m512 acc[RR][G];
  for (int r = 0; r < RR; ++r)
    for (int g = 0; g < G; ++g) acc[r][g] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 16) {
    __m512 wk[RR];
    for (int r = 0; r < RR; ++r) wk[r] = _mm512_loadu_ps(w + r * K + k);
    for (int g = 0; g < G; ++g) {
      const __m512 xv = _mm512_loadu_ps(x + (m0 + g) * K + k);
      for (int r = 0; r < RR; ++r) acc[r][g] = _mm512_fmadd_ps(wk[r], xv, acc[r][g]);
    }
  }
  for (int r = 0; r < RR; ++r)
    for (int g = 0; g < G; ++g) y[(m0 + g) * N + n0 + r] = _mm512_reduce_add_ps(acc[r][g]);
}
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int R = 2, G_MAX = 5;  // 10 accumulators + 2 weights + 1 input of the 16 ymm registers
inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}
template <int G, int RR>
void strip_rows(const float* x, int64_t K, const float* w, float* y, int64_t N, int64_t m0, int64_t n0) {
  __m256 acc[RR][G];
  for (int r = 0; r < RR; ++r)
    for (int g = 0; g < G; ++g) acc[r][g] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; k += 8) {
    __m256 wk[RR];
    for (int r = 0; r < RR; ++r) wk[r] = _mm256_loadu_ps(w + r * K + k);
    for (int g = 0; g < G; ++g) {
      const __m256 xv = _mm256_loadu_ps(x + (m0 + g) * K + k);
      for (int r = 0; r < RR; ++r) acc[r][g] = _mm256_fmadd_ps(wk[r], xv, acc[r][g]);
    }
  }
  for (int r = 0; r < RR; ++r)
    for (int g = 0; g < G; ++g) y[(m0 + g) * N + n0 + r] = hsum(acc[r][g]);
}
#else
constexpr int R = 2, G_MAX = 4;
constexpr int L = 8;  // scalar lanes, summed pairwise at the end
template <int G, int RR>
void strip_rows(const float* x, int64_t K, const float* w, float* y, int64_t N, int64_t m0, int64_t n0) {
  float acc[RR][G][L] = {};
  for (int64_t k = 0; k < K; k += L)
    for (int r = 0; r < RR; ++r)
      for (int g = 0; g < G; ++g)
        for (int l = 0; l < L; ++l) acc[r][g][l] = std::fma(w[r * K + k + l], x[(m0 + g) * K + k + l], acc[r][g][l]);
  for (int r = 0; r < RR; ++r)
    for (int g = 0; g < G; ++g) {
      float* a = acc[r][g];
      y[(m0 + g) * N + n0 + r] = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
    }
}
#endif

template <int RR>
void strip_all_rows(const float* x, int64_t M, int64_t K, const float* w, float* y, int64_t N, int64_t n0) {
  int64_t m = 0;
  for (; m + G_MAX <= M; m += G_MAX) strip_rows<G_MAX, RR>(x, K, w, y, N, m, n0);
  switch (M - m) {
    case 5: strip_rows<5, RR>(x, K, w, y, N, m, n0); break;  // cases >= G_MAX never occur
    case 4: strip_rows<4, RR>(x, K, w, y, N, m, n0); break;
    case 3: strip_rows<3, RR>(x, K, w, y, N, m, n0); break;
    case 2: strip_rows<2, RR>(x, K, w, y, N, m, n0); break;
    case 1: strip_rows<1, RR>(x, K, w, y, N, m, n0); break;
    default: break;
  }
}

#if defined(__AVX512F__)
// The register path: y[m0 : m0+G, n0 : n0+RR] straight from the blocks, dequantized in registers (no buffer). Same
// values and the same FMA sequence per output as strip_rows over the dequantized strip (k in order, 16 lanes, then
// _mm512_reduce_add_ps), so both paths give the same bits: the row count picks the path, not the result.
template <int64_t type, int G, int RR>
void fused_rows(const float* x, int64_t K, const uint8_t* strip, int64_t row_bytes, float* y, int64_t N, int64_t m0,
                int64_t n0, int64_t ahead) {
  constexpr int64_t bb = block_bytes(type);
  __m512 acc[RR][G];
  for (int r = 0; r < RR; ++r)
    for (int g = 0; g < G; ++g) acc[r][g] = _mm512_setzero_ps();
  for (int64_t b = 0; b < K / QK; ++b) {
    __m512 lo[RR], hi[RR];
    if (b % prefetch_every<bb>() == 0)
      for (int r = 0; r < RR; ++r) prefetch_line(strip + ahead + r * row_bytes + b * bb);
    for (int r = 0; r < RR; ++r) dequant_regs<type>(strip + r * row_bytes + b * bb, lo[r], hi[r]);
    for (int g = 0; g < G; ++g) {
      const float* xg = x + (m0 + g) * K + b * QK;
      const __m512 x0 = _mm512_loadu_ps(xg), x1 = _mm512_loadu_ps(xg + 16);
      for (int r = 0; r < RR; ++r) acc[r][g] = _mm512_fmadd_ps(lo[r], x0, acc[r][g]);
      for (int r = 0; r < RR; ++r) acc[r][g] = _mm512_fmadd_ps(hi[r], x1, acc[r][g]);
    }
  }
  for (int r = 0; r < RR; ++r)
    for (int g = 0; g < G; ++g) y[(m0 + g) * N + n0 + r] = _mm512_reduce_add_ps(acc[r][g]);
}

// Register budget of the two shapes (32 zmm): G <= 4 rows x RR = 4 weight rows (16 accumulators + 8 weights + 2
// inputs), and G <= FUSED_GROUP = 8 rows x RR = 2 (16 + 4 + 2)
constexpr int FUSED_WIDE = 4, FUSED_GROUP = 8;
template <int64_t type, int RR>
void fused_group(const float* x, int64_t G, int64_t K, const uint8_t* strip, int64_t row_bytes, float* y, int64_t N,
                 int64_t m0, int64_t n0, int64_t ahead) {
  switch (G) {
    case 8: fused_rows<type, 8, RR>(x, K, strip, row_bytes, y, N, m0, n0, ahead); break;
    case 7: fused_rows<type, 7, RR>(x, K, strip, row_bytes, y, N, m0, n0, ahead); break;
    case 6: fused_rows<type, 6, RR>(x, K, strip, row_bytes, y, N, m0, n0, ahead); break;
    case 5: fused_rows<type, 5, RR>(x, K, strip, row_bytes, y, N, m0, n0, ahead); break;
    case 4: fused_rows<type, 4, RR>(x, K, strip, row_bytes, y, N, m0, n0, ahead); break;
    case 3: fused_rows<type, 3, RR>(x, K, strip, row_bytes, y, N, m0, n0, ahead); break;
    case 2: fused_rows<type, 2, RR>(x, K, strip, row_bytes, y, N, m0, n0, ahead); break;
    default: fused_rows<type, 1, RR>(x, K, strip, row_bytes, y, N, m0, n0, ahead); break;
  }
}

// all M rows against one strip of `rows` <= R weight rows: up to FUSED_WIDE input rows against the whole strip (each
// weight dequantized once); more in groups of FUSED_GROUP against 2 weight rows at a time (each weight dequantized
// once per group: at 5-96 rows faster than dequantizing into a buffer once, measured in docs/design.md)
template <int64_t type>
void fused_strip(const float* x, int64_t M, int64_t K, const uint8_t* strip, int64_t row_bytes, int64_t rows,
                 float* y, int64_t N, int64_t n0, int64_t ahead) {
  if (rows == R && M <= FUSED_WIDE) {
    fused_group<type, R>(x, M, K, strip, row_bytes, y, N, 0, n0, ahead);
    return;
  }
  int64_t r = 0;
  for (; r + 2 <= rows; r += 2)
    for (int64_t m = 0; m < M; m += FUSED_GROUP)
      fused_group<type, 2>(x, std::min<int64_t>(FUSED_GROUP, M - m), K, strip + r * row_bytes, row_bytes, y, N, m,
                           n0 + r, ahead);
  for (; r < rows; ++r)
    for (int64_t m = 0; m < M; m += FUSED_GROUP)
      fused_group<type, 1>(x, std::min<int64_t>(FUSED_GROUP, M - m), K, strip + r * row_bytes, row_bytes, y, N, m,
                           n0 + r, ahead);
}

template <int64_t type>
void fused_linear(const float* x, int64_t M, int64_t K, const uint8_t* bp, float* y, int64_t N) {
  const int64_t row_bytes = K / QK * block_bytes(type), strips = (N + R - 1) / R, ahead = prefetch_ahead(R * row_bytes);
  at::parallel_for(0, strips, 16, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      const int64_t n0 = s * R;
      fused_strip<type>(x, M, K, bp + n0 * row_bytes, row_bytes, std::min<int64_t>(R, N - n0), y, N, n0, ahead);
    }
  });
}

#endif

}  // namespace

// x [M, K] fp32 contiguous; blocks [N, K/32 * block_bytes(type)] uint8 (a GGUF tensor's rows as stored) -> y [M, N]
torch::Tensor quant_linear(torch::Tensor x, torch::Tensor blocks, int64_t type) {
  const int64_t bb = block_bytes(type);
  TORCH_CHECK(bb > 0, "quant_linear: unsupported type ", type, " (F16=1, Q4_0=2, Q4_1=3, Q8_0=8, BF16=30, Q4_0S=102, "
              "Q4_1S=103, Q5_0S=106, Q5_1S=107, Q8S=108)");
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == torch::kFloat, "x: [M, K] contiguous fp32");
  const int64_t M = x.size(0), K = x.size(1), N = blocks.size(0), nb = K / QK;
  TORCH_CHECK(K % QK == 0 && blocks.dim() == 2 && blocks.is_contiguous() && blocks.scalar_type() == torch::kUInt8 &&
                  blocks.size(1) == nb * bb,
              "blocks: [N, K/32 * ", bb, "] contiguous uint8 for K = ", K);
  auto y = torch::empty({M, N}, x.options());
  const float* xp = x.data_ptr<float>();
  const uint8_t* bp = blocks.data_ptr<uint8_t>();
  float* yp = y.data_ptr<float>();
#if defined(__AVX512F__)
  if (type != Q8_0 || M > 3) {  // Q8_0 (the LM head) at 1-3 rows: faster through the buffer (docs/design.md)
    switch (type) {
      case Q4_0: fused_linear<Q4_0>(xp, M, K, bp, yp, N); break;
      case Q4_1: fused_linear<Q4_1>(xp, M, K, bp, yp, N); break;
      case Q4_0S: fused_linear<Q4_0S>(xp, M, K, bp, yp, N); break;
      case Q4_1S: fused_linear<Q4_1S>(xp, M, K, bp, yp, N); break;
      case Q5_0S: fused_linear<Q5_0S>(xp, M, K, bp, yp, N); break;
      case Q5_1S: fused_linear<Q5_1S>(xp, M, K, bp, yp, N); break;
      case Q8S: fused_linear<Q8S>(xp, M, K, bp, yp, N); break;
      case Q8_0: fused_linear<Q8_0>(xp, M, K, bp, yp, N); break;
      case BF16: fused_linear<BF16>(xp, M, K, bp, yp, N); break;
      default: fused_linear<F16>(xp, M, K, bp, yp, N); break;
    }
    return y;
  }
#endif
  const int64_t strips = (N + R - 1) / R, ahead = prefetch_ahead(R * nb * bb);
  at::parallel_for(0, strips, 16, [&](int64_t s0, int64_t s1) {
    std::vector<float> w(R * K);  // this thread's dequantized strip [R, K]
    for (int64_t s = s0; s < s1; ++s) {
      const int64_t n0 = s * R, rows = std::min<int64_t>(R, N - n0);
      for (int64_t r = 0; r < rows; ++r) dequant_row(type, bp + (n0 + r) * nb * bb, nb, ahead, w.data() + r * K);
      if (rows == R) {
        strip_all_rows<R>(xp, M, K, w.data(), yp, N, n0);
      } else {  // the last strip of an N that is not a multiple of R: one row at a time (same per-row arithmetic)
        for (int64_t r = 0; r < rows; ++r) strip_all_rows<1>(xp, M, K, w.data() + r * K, yp, N, n0 + r);
      }
    }
  });
  return y;
}

// blocks [N, K/32 * block_bytes] -> W [N, K] fp32, as the kernel sees it (tests compare it with gguf-py's dequantize)
torch::Tensor quant_dequantize(torch::Tensor blocks, int64_t type, int64_t K) {
  const int64_t bb = block_bytes(type), N = blocks.size(0), nb = K / QK;
  TORCH_CHECK(bb > 0 && K % QK == 0 && blocks.is_contiguous() && blocks.size(1) == nb * bb, "bad blocks/type/K");
  auto w = torch::empty({N, K}, torch::kFloat);
  const uint8_t* bp = blocks.data_ptr<uint8_t>();
  float* wp = w.data_ptr<float>();
  for (int64_t n = 0; n < N; ++n) dequant_row(type, bp + n * nb * bb, nb, 0, wp + n * K);
  return w;
}

// blocks [N, K/32 * block_bytes(type)] -> (the same weights in the layout the kernel runs, its type): Q4_0 -> Q4_0S,
// Q4_1 -> Q4_1S (fp16 scales widened to fp32, exactly); other types as they are
std::tuple<torch::Tensor, int64_t> quant_repack(torch::Tensor blocks, int64_t type, int64_t K) {
  const int64_t bb = block_bytes(type), N = blocks.size(0), nb = K / QK;
  TORCH_CHECK(bb > 0 && K % QK == 0 && blocks.is_contiguous() && blocks.size(1) == nb * bb, "bad blocks/type/K");
  if (type != Q4_0 && type != Q4_1) return {blocks, type};
  const int64_t to = type == Q4_0 ? Q4_0S : Q4_1S, scales = type == Q4_0 ? 1 : 2, ob = block_bytes(to);
  auto out = torch::empty({N, nb * ob}, blocks.options());
  const uint8_t* src = blocks.data_ptr<uint8_t>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  for (int64_t i = 0; i < N * nb; ++i) {
    const uint8_t* b = src + i * bb;
    uint8_t* o = dst + i * ob;
    for (int64_t s = 0; s < scales; ++s) {
      const float v = half_to_float(b + 2 * s);
      std::memcpy(o + 4 * s, &v, 4);
    }
    std::memcpy(o + 4 * scales, b + 2 * scales, 16);
  }
  return {out, to};
}

int64_t quant_rows_per_strip() { return R; }
// input rows per pass over the weights of a multi-row call: a verify of one row more pays a new pass
#if defined(__AVX512F__)
int64_t quant_row_group() { return FUSED_GROUP; }
#else
int64_t quant_row_group() { return G_MAX; }
#endif
