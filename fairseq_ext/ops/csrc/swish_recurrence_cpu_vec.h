// fp32 CPU kernels of fairseq_ext::swish_recurrence (SwishRNN, Lei et al., Eq. 3), vectorized
// across contiguous channels with ATen's at::vec::Vectorized<float>.
//
// This header is compiled twice: by swish_recurrence_cpu_avx2.cpp (with -mavx2 -mfma and
// CPU_CAPABILITY_AVX2, so Vectorized<float> is 8 AVX2 lanes and exp_u20 a polynomial in FMA
// instructions) and by swish_recurrence_cpu_default.cpp (ATen's portable Vectorized). Each
// includes it inside its own namespace; swish_recurrence.cpp picks the AVX2 one at run time when
// the CPU has AVX2 and FMA. The functions take raw pointers and one block of columns (column =
// b * D + d of the time-major (T, B, D) layout): the caller parallelises over blocks, so this
// file needs no torch type but Vectorized.
//
//   forward:  z = c[t-k] - x1[t],  s = sigmoid(alpha z + beta),  c[t] = s z + x1[t]
//   backward: G = dL/dc[t] + dz[t+k],  dz = G (s + alpha z s (1 - s)),  dx1[t] = G - dz,
//             dalpha += G z^2 s (1 - s),  dbeta += G z s (1 - s)
//
// Include it inside a namespace of its own, after <ATen/cpu/vec/vec.h> and <cstdint> at global
// scope (see swish_recurrence_cpu_avx2.cpp).
//
// sigmoid(v) = 1 / (1 + exp(-v)) with Vectorized::exp_u20 (a degree-5 polynomial on the reduced
// argument, clamped to float's range, ~1e-7 relative error). The forward and the backward use
// the same sigmoid, so the gradient is that of the function the forward computed.

using Vec = at::vec::Vectorized<float>;

inline Vec vec_sigmoid(const Vec& v) {
  const Vec one(1.0f);
  return one / (one + v.neg().exp_u20());
}

// Forward of the columns [begin, begin + width) over all T steps. `state` holds k * width
// floats (zeroed by the caller): state[chain][j] carries c of the chain's last step; `alpha`,
// `beta` hold the width per-column values (alpha[(begin + j) % D]).
inline void forward_block(const float* x1, const float* alpha, const float* beta, float* c,
                          float* state, int64_t length, int64_t columns, int64_t begin,
                          int64_t width, int64_t k) {
  constexpr int64_t lanes = Vec::size();
  for (int64_t t = 0; t < length; ++t) {
    float* previous = state + (t % k) * width;
    const float* x_row = x1 + t * columns + begin;
    float* c_row = c + t * columns + begin;
    for (int64_t j = 0; j < width; j += lanes) {
      const int64_t n = width - j < lanes ? width - j : lanes;
      const Vec x = Vec::loadu(x_row + j, n);
      const Vec z = Vec::loadu(previous + j, n) - x;
      const Vec s = vec_sigmoid(at::vec::fmadd(Vec::loadu(alpha + j, n), z,
                                               Vec::loadu(beta + j, n)));
      const Vec out = at::vec::fmadd(s, z, x);
      out.store(previous + j, n);
      out.store(c_row + j, n);
    }
  }
}

// Backward of the columns [begin, begin + width): grad_x1 of the block, and the block's sums of
// the alpha and beta gradients added into d_alpha / d_beta (width floats each, zeroed by the
// caller). `carry` holds k * width floats (zeroed): dL/dc[t] sent back by step t + k.
inline void backward_block(const float* grad_c, const float* x1, const float* c,
                           const float* alpha, const float* beta, float* grad_x1, float* d_alpha,
                           float* d_beta, float* carry, int64_t length, int64_t columns,
                           int64_t begin, int64_t width, int64_t k) {
  constexpr int64_t lanes = Vec::size();
  const Vec one(1.0f);
  for (int64_t t = length - 1; t >= 0; --t) {
    float* incoming = carry + (t % k) * width;
    const int64_t row = t * columns + begin;
    const bool has_previous = t >= k;
    for (int64_t j = 0; j < width; j += lanes) {
      const int64_t n = width - j < lanes ? width - j : lanes;
      const Vec g = Vec::loadu(grad_c + row + j, n) + Vec::loadu(incoming + j, n);
      const Vec x = Vec::loadu(x1 + row + j, n);
      const Vec previous = has_previous ? Vec::loadu(c + row - k * columns + j, n) : Vec(0.0f);
      const Vec z = previous - x;
      const Vec a = Vec::loadu(alpha + j, n);
      const Vec s = vec_sigmoid(at::vec::fmadd(a, z, Vec::loadu(beta + j, n)));
      const Vec g_z_ds = g * z * s * (one - s);  // G z s (1 - s)
      const Vec dz = at::vec::fmadd(g, s, a * g_z_ds);
      (g - dz).store(grad_x1 + row + j, n);
      at::vec::fmadd(g_z_ds, z, Vec::loadu(d_alpha + j, n)).store(d_alpha + j, n);
      (g_z_ds + Vec::loadu(d_beta + j, n)).store(d_beta + j, n);
      dz.store(incoming + j, n);
    }
  }
}
