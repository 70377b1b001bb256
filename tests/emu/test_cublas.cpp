// The emulated cuBLAS (emu/cublas.cpp): GEMM with every pair of transposes, padded leading
// dimensions, alpha and beta, fp32 and bf16 operands and outputs, against a naive column-major
// loop; GEMV both ways with strides; AXPY; and the argument checks cuBLAS documents, with the
// emulation's own of pointers outside device memory.
#include <catch2/catch.hpp>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/base/check.h"
#include "tests/device_buffer.h"
#include "tests/gradcheck.h"

using namespace cutrain;
using test::PoisonedBuffer;

namespace {

// A cuBLAS handle on its own stream.
struct Blas {
  cudaStream_t stream = nullptr;
  cublasHandle_t handle = nullptr;
  Blas() {
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CUBLAS_CHECK(cublasCreate(&handle));
    CUBLAS_CHECK(cublasSetStream(handle, stream));
  }
  ~Blas() {
    cublasDestroy(handle);
    cudaStreamDestroy(stream);
  }
};

// op(M)[row, col] of a column-major matrix with leading dimension ld.
float element(const std::vector<float>& m, int ld, bool transposed, int row, int col) {
  return transposed ? m[size_t(col) + size_t(row) * ld] : m[size_t(row) + size_t(col) * ld];
}

}  // namespace

TEST_CASE("emulated cuBLAS: GEMM with each pair of transposes equals a naive column-major loop", "[emu]") {
  std::mt19937 rng(2024);
  Blas blas;
  const int m = 5, n = 4, k = 3;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool bf16 : {false, true}) {
        CAPTURE(ta, tb, bf16);
        // Leading dimensions with room to spare, which the product must skip.
        const int lda = (ta ? k : m) + 2, ldb = (tb ? n : k) + 1, ldc = m + 3;
        const int a_cols = ta ? m : k, b_cols = tb ? k : n;
        const auto a = test::rounded_to<__nv_bfloat16>(test::random_vector(size_t(lda) * a_cols, rng));
        const auto b = test::rounded_to<__nv_bfloat16>(test::random_vector(size_t(ldb) * b_cols, rng));
        const auto c0 = test::random_vector(size_t(ldc) * n, rng);
        PoisonedBuffer<float> c(c0);
        const float alpha = 0.5f, beta = 1.0f;
        const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
        if (bf16) {
          PoisonedBuffer<__nv_bfloat16> a_d(test::convert_to<__nv_bfloat16>(a)), b_d(test::convert_to<__nv_bfloat16>(b));
          REQUIRE(cublasGemmEx(blas.handle, op_a, op_b, m, n, k, &alpha, a_d.get(), CUDA_R_16BF, lda, b_d.get(),
                               CUDA_R_16BF, ldb, &beta, c.get(), CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
        } else {
          PoisonedBuffer<float> a_d(a), b_d(b);
          REQUIRE(cublasSgemm(blas.handle, op_a, op_b, m, n, k, &alpha, a_d.get(), lda, b_d.get(), ldb, &beta,
                              c.get(), ldc) == CUBLAS_STATUS_SUCCESS);
        }
        const std::vector<float> got = c.copy_to_host();
        for (int j = 0; j < n; ++j)
          for (int i = 0; i < ldc; ++i) {
            const size_t at = size_t(i) + size_t(j) * ldc;
            if (i >= m) {
              CHECK(got[at] == c0[at]);  // padding rows are left alone
              continue;
            }
            double sum = 0;
            for (int p = 0; p < k; ++p) sum += double(element(a, lda, ta, i, p)) * element(b, ldb, tb, p, j);
            CHECK(got[at] == Approx(alpha * sum + beta * c0[at]).margin(1e-5));
          }
      }
}

TEST_CASE("emulated cuBLAS: a bf16 GEMM output is rounded to nearest even, and beta = 0 does not read C", "[emu]") {
  Blas blas;
  // C[1x2] = [1 1] B: the columns of B sum to 1 + 2^-7 + 2^-8 and 1 + 2^-8, each halfway between
  // two bf16 values (spacing 2^-7 near 1). Ties go to the even one: up to 1 + 2^-6, down to 1.
  // Truncation would give 1 + 2^-7 for the first, rounding half up 1 + 2^-7 for the second.
  const float e7 = 1.0f / 128, e8 = 1.0f / 256;
  PoisonedBuffer<__nv_bfloat16> a(test::convert_to<__nv_bfloat16>({1.0f, 1.0f}));
  PoisonedBuffer<__nv_bfloat16> b(test::convert_to<__nv_bfloat16>({1.0f + e7, e8, 1.0f, e8}));
  PoisonedBuffer<__nv_bfloat16> c(2);  // starts as NaN
  const float one = 1.0f, zero = 0.0f;
  REQUIRE(cublasGemmEx(blas.handle, CUBLAS_OP_N, CUBLAS_OP_N, 1, 2, 2, &one, a.get(), CUDA_R_16BF, 1, b.get(),
                       CUDA_R_16BF, 2, &zero, c.get(), CUDA_R_16BF, 1, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  const std::vector<float> got = test::download(c);
  CHECK(got[0] == 1.0f + 2 * e7);
  CHECK(got[1] == 1.0f);
}

TEST_CASE("emulated cuBLAS: GEMV both ways with strides, and AXPY", "[emu]") {
  std::mt19937 rng(2024);
  Blas blas;
  const int m = 4, n = 3, lda = 6;
  const auto a = test::random_vector(size_t(lda) * n, rng);
  PoisonedBuffer<float> a_d(a);
  for (bool transposed : {false, true}) {
    CAPTURE(transposed);
    const int x_n = transposed ? m : n, y_n = transposed ? n : m, incx = 2, incy = 3;
    const auto x = test::random_vector(size_t(x_n) * incx, rng);
    const auto y0 = test::random_vector(size_t(y_n) * incy, rng);
    PoisonedBuffer<float> x_d(x), y_d(y0);
    const float alpha = 2.0f, beta = 0.5f;
    REQUIRE(cublasSgemv(blas.handle, transposed ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, &alpha, a_d.get(), lda, x_d.get(),
                        incx, &beta, y_d.get(), incy) == CUBLAS_STATUS_SUCCESS);
    const std::vector<float> y = y_d.copy_to_host();
    for (int i = 0; i < y_n; ++i) {
      double sum = 0;
      for (int p = 0; p < x_n; ++p) sum += double(element(a, lda, transposed, i, p)) * x[size_t(p) * incx];
      CHECK(y[size_t(i) * incy] == Approx(alpha * sum + beta * y0[size_t(i) * incy]).margin(1e-5));
      for (int gap = 1; gap < incy; ++gap) CHECK(y[size_t(i) * incy + gap] == y0[size_t(i) * incy + gap]);
    }
  }
  const auto x = test::random_vector(5, rng), y0 = test::random_vector(5, rng);
  PoisonedBuffer<float> x_d(x), y_d(y0);
  float alpha = 3.0f;
  REQUIRE(cublasSaxpy(blas.handle, 5, &alpha, x_d.get(), 1, y_d.get(), 1) == CUBLAS_STATUS_SUCCESS);
  alpha = 100.0f;  // alpha is read when the call is made, not when the work runs
  const std::vector<float> y = y_d.copy_to_host();
  for (int i = 0; i < 5; ++i) CHECK(y[size_t(i)] == Approx(y0[size_t(i)] + 3.0f * x[size_t(i)]));
}

TEST_CASE("emulated cuBLAS: arguments are checked as cuBLAS documents, and operands must be device memory", "[emu]") {
  Blas blas;
  const int m = 4, n = 3, k = 2;
  PoisonedBuffer<float> a(size_t(m) * k), b(size_t(k) * n), c(size_t(m) * n);
  std::vector<float> host(size_t(m) * n);
  const float one = 1.0f;
  auto sgemm = [&](int lda, const float* a_ptr, float* c_ptr) {
    return cublasSgemm(blas.handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a_ptr, lda, b.get(), k, &one, c_ptr, m);
  };
  CHECK(sgemm(m, a.get(), c.get()) == CUBLAS_STATUS_SUCCESS);
  CHECK(sgemm(m - 1, a.get(), c.get()) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(sgemm(m, a.get(), host.data()) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(sgemm(m, a.get() + 1, c.get()) == CUBLAS_STATUS_INVALID_VALUE);  // runs one element past A
  CHECK(std::string(cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE)).find("device allocation") != std::string::npos);
  CHECK(cublasSgemm(blas.handle, CUBLAS_OP_N, CUBLAS_OP_N, -1, n, k, &one, a.get(), m, b.get(), k, &one, c.get(), m) ==
        CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasGemmEx(blas.handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a.get(), CUDA_R_16BF, m, b.get(),
                     CUDA_R_16BF, k, &one, c.get(), CUDA_R_32F, m, CUBLAS_COMPUTE_32F_FAST_TF32,
                     CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_SUPPORTED);
  CHECK(cublasGemmEx(blas.handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a.get(), CUDA_R_32F, m, b.get(), CUDA_R_32F,
                     k, &one, c.get(), CUDA_R_32F, m, CUBLAS_COMPUTE_32F_FAST_TF32,
                     CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  CHECK(cublasSgemv(blas.handle, CUBLAS_OP_N, m, k, &one, a.get(), m, b.get(), 0, &one, c.get(), 1) ==
        CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasSetMathMode(blas.handle, CUBLAS_TF32_TENSOR_OP_MATH) == CUBLAS_STATUS_SUCCESS);
  CHECK(cublasSetMathMode(blas.handle, cublasMath_t(5)) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasSetWorkspace(blas.handle, host.data(), host.size() * sizeof(float)) != CUBLAS_STATUS_SUCCESS);
  PoisonedBuffer<unsigned char> workspace(4096);
  CHECK(cublasSetWorkspace(blas.handle, workspace.get(), 4096) == CUBLAS_STATUS_SUCCESS);
  int major = 0;
  CHECK(cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS);
  CHECK(major == CUBLAS_VER_MAJOR);
}
