// cublas.cpp: the emulated cuBLAS of emu/include/cublas_v2.h. Each call checks its
// arguments as cuBLAS documents (CUBLAS_STATUS_INVALID_VALUE for a negative size, a leading
// dimension too small, a zero increment; NOT_SUPPORTED for a type combination cuBLAS lacks), then
// that its operands lie in device memory, reads alpha and beta, and enqueues plain loops on the
// handle's stream with everything captured by value. While a recorder is installed
// (emu/recording.h), each product that passes the checks is also written down with what it
// computes and moves, and not enqueued when the device is record-only (Note [Record-only device]
// in runtime.h).
#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <tuple>

#include "emu/bf16.h"
#include "emu/recording.h"
#include "emu/refusal.h"
#include "emu/runtime.h"

struct cublasContext {
  cudaStream_t stream = nullptr;  // the legacy default stream until cublasSetStream
};

namespace cutrain::emu {
namespace {

thread_local Refusal<cublasStatus_t> refusal;

cublasStatus_t fail(cublasStatus_t status, const std::string& why) { return refusal.refuse(status, why); }

const char* status_name(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

size_t element_bytes(cudaDataType t) { return t == CUDA_R_16BF ? 2 : 4; }

float load(const void* p, cudaDataType t, int64_t i) {
  if (t == CUDA_R_16BF) return cutrain_emu_bf16_bits_to_float(static_cast<const uint16_t*>(p)[i]);
  return static_cast<const float*>(p)[i];
}

void store(void* p, cudaDataType t, int64_t i, float v) {
  if (t == CUDA_R_16BF) {
    static_cast<uint16_t*>(p)[i] = cutrain_emu_float_to_bf16_bits(v);
  } else {
    static_cast<float*>(p)[i] = v;
  }
}

// out = alpha * sum + beta * out, out not read when beta is 0 (cuBLAS's rule).
void blend(void* out, cudaDataType t, int64_t i, float alpha, float sum, float beta) {
  const float prior = beta != 0.0f ? beta * load(out, t, i) : 0.0f;
  store(out, t, i, alpha * sum + prior);
}

// Device memory for `elements` elements of `bytes_each` at `p`. Real cuBLAS cannot tell: its
// kernel would fault later with cudaErrorIllegalAddress. The emulation names the mistake at the
// call, with CUBLAS_STATUS_INVALID_VALUE.
cublasStatus_t check_device(const void* p, int64_t elements, size_t bytes_each, const char* what) {
  if (elements <= 0) return CUBLAS_STATUS_SUCCESS;
  const size_t bytes = size_t(elements) * bytes_each;
  if (!p || !inside_device_allocation(p, bytes))
    return fail(CUBLAS_STATUS_INVALID_VALUE,
                std::string(what) + " is not " + std::to_string(bytes) + " bytes inside one live device allocation");
  return CUBLAS_STATUS_SUCCESS;
}

// ---- matrices: column-major, op(M) = M, or its transpose for CUBLAS_OP_T (and OP_C, which for
// real types is the same) ----

struct Matrix {
  const void* data;
  cudaDataType type;
  int64_t ld;
  bool transposed;
  // op(M)[row, col]
  float at(int64_t row, int64_t col) const {
    return transposed ? load(data, type, col + row * ld) : load(data, type, row + col * ld);
  }
};

bool valid_op(cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; }

// The elements a column-major rows x cols matrix with leading dimension ld spans.
int64_t span(int64_t rows, int64_t cols, int64_t ld) { return rows > 0 && cols > 0 ? (cols - 1) * ld + rows : 0; }

// A product C[m,n] = A[m,k] B[k,n] (+ C), for the step's record: 2mnk FLOPs; A and B read in their
// types, C written (and read when beta adds to it) in its own.
bool recorded_product(const char* call, cudaStream_t stream, int64_t m, int64_t n, int64_t k, cudaDataType in,
                      cudaDataType out, float beta) {
  if (!recording()) return false;
  const int64_t c_bytes = m * n * int64_t(element_bytes(out));
  RecordedOp op;
  op.kind = RecordedOp::Kind::library;
  op.name = call;
  op.detail = "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k);
  op.bytes = {(m * k + k * n) * int64_t(element_bytes(in)) + (beta != 0 ? c_bytes : 0), c_bytes};
  op.flops = 2.0 * double(m) * double(n) * double(k);
  op.stream = stream;
  return record_instead(std::move(op));
}

// C = alpha * op(A) op(B) + beta * C: cuBLAS's checks, then the product on the stream.
cublasStatus_t gemm(const char* call, cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                    int n, int k, const float* alpha, const void* A, cudaDataType a_type, int lda, const void* B,
                    cudaDataType b_type, int ldb, const float* beta, void* C, cudaDataType c_type, int ldc) {
  if (!handle) return fail(CUBLAS_STATUS_NOT_INITIALIZED, "the handle is null");
  if (!valid_op(transa) || !valid_op(transb)) return fail(CUBLAS_STATUS_INVALID_VALUE, "invalid operation");
  if (m < 0 || n < 0 || k < 0) return fail(CUBLAS_STATUS_INVALID_VALUE, "a negative dimension");
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
  if (lda < std::max<int64_t>(1, a_rows) || ldb < std::max<int64_t>(1, b_rows) || ldc < std::max(1, m))
    return fail(CUBLAS_STATUS_INVALID_VALUE, "a leading dimension is smaller than its matrix's rows");
  if (!alpha || !beta) return fail(CUBLAS_STATUS_INVALID_VALUE, "alpha or beta is null");
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  for (auto [p, elements, type, name] :
       {std::tuple{A, span(a_rows, a_cols, lda), a_type, "A"}, std::tuple{B, span(b_rows, b_cols, ldb), b_type, "B"},
        std::tuple{static_cast<const void*>(C), span(m, n, ldc), c_type, "C"}})
    if (cublasStatus_t s = check_device(p, elements, element_bytes(type), name); s != CUBLAS_STATUS_SUCCESS) return s;
  const Matrix a{A, a_type, lda, ta}, b{B, b_type, ldb, tb};
  const float alpha_value = *alpha, beta_value = *beta;
  if (recorded_product(call, handle->stream, m, n, k, a_type, c_type, beta_value)) return CUBLAS_STATUS_SUCCESS;
  const cudaError_t queued = enqueue(handle->stream, "cublasGemm", [=] {
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < m; ++i) {
        float sum = 0.0f;
        for (int64_t p = 0; p < k; ++p) sum += a.at(i, p) * b.at(p, j);
        blend(C, c_type, i + j * ldc, alpha_value, sum, beta_value);
      }
  });
  if (queued != cudaSuccess) return fail(CUBLAS_STATUS_EXECUTION_FAILED, "the handle's stream does not take work");
  return CUBLAS_STATUS_SUCCESS;
}

// Vector element i of n with increment inc: BLAS walks a negative increment from the far end.
int64_t vector_index(int64_t i, int64_t n, int inc) { return inc > 0 ? i * inc : (n - 1 - i) * int64_t(-inc); }
int64_t vector_span(int64_t n, int inc) { return n > 0 ? (n - 1) * std::abs(int64_t(inc)) + 1 : 0; }

}  // namespace
}  // namespace cutrain::emu

using namespace cutrain::emu;

extern "C" {

// cuBLAS's name of the status; for the emulation's last refusal with this status, also why.
const char* cublasGetStatusString(cublasStatus_t status) {
  return refusal.describe(status, status_name(status), "cuBLAS");
}

cublasStatus_t cublasGetProperty(libraryPropertyType type, int* value) {
  if (!value) return fail(CUBLAS_STATUS_INVALID_VALUE, "the value pointer is null");
  switch (type) {
    case MAJOR_VERSION: *value = CUBLAS_VER_MAJOR; return CUBLAS_STATUS_SUCCESS;
    case MINOR_VERSION: *value = CUBLAS_VER_MINOR; return CUBLAS_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = CUBLAS_VER_PATCH; return CUBLAS_STATUS_SUCCESS;
  }
  return fail(CUBLAS_STATUS_INVALID_VALUE, "no such property");
}

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (!handle) return fail(CUBLAS_STATUS_INVALID_VALUE, "the handle pointer is null");
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (!handle) return fail(CUBLAS_STATUS_NOT_INITIALIZED, "the handle is null");
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return fail(CUBLAS_STATUS_NOT_INITIALIZED, "the handle is null");
  if (!valid_stream(stream)) return fail(CUBLAS_STATUS_INVALID_VALUE, "the stream is not a live stream");
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

// The emulation's products need no workspace; it is only checked, as cuBLAS documents (aligned to
// 256 bytes), and to lie in device memory.
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) {
  if (!handle) return fail(CUBLAS_STATUS_NOT_INITIALIZED, "the handle is null");
  if (reinterpret_cast<uintptr_t>(workspace) % 256 != 0)
    return fail(CUBLAS_STATUS_INVALID_VALUE, "the workspace is not aligned to 256 bytes");
  if (bytes > 0 && !inside_device_allocation(workspace, bytes))
    return fail(CUBLAS_STATUS_INVALID_VALUE,
                "the workspace is not " + std::to_string(bytes) + " bytes inside one live device allocation");
  return CUBLAS_STATUS_SUCCESS;
}

// Checked only: every product sums in fp32, whatever the math mode (cublas_v2.h).
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (!handle) return fail(CUBLAS_STATUS_NOT_INITIALIZED, "the handle is null");
  const int base = mode & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
  if (base != CUBLAS_DEFAULT_MATH && base != CUBLAS_TENSOR_OP_MATH && base != CUBLAS_PEDANTIC_MATH &&
      base != CUBLAS_TF32_TENSOR_OP_MATH && base != CUBLAS_FP32_EMULATED_BF16X9_MATH &&
      base != CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH)
    return fail(CUBLAS_STATUS_INVALID_VALUE, "invalid math mode");
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSaxpy_v2(cublasHandle_t handle, int n, const float* alpha, const float* x, int incx, float* y,
                              int incy) {
  if (!handle) return fail(CUBLAS_STATUS_NOT_INITIALIZED, "the handle is null");
  if (!alpha) return fail(CUBLAS_STATUS_INVALID_VALUE, "alpha is null");
  if (n <= 0) return CUBLAS_STATUS_SUCCESS;
  if (cublasStatus_t s = check_device(x, vector_span(n, incx), sizeof(float), "x"); s != CUBLAS_STATUS_SUCCESS)
    return s;
  if (cublasStatus_t s = check_device(y, vector_span(n, incy), sizeof(float), "y"); s != CUBLAS_STATUS_SUCCESS)
    return s;
  const float a = *alpha;
  const cudaError_t queued = enqueue(handle->stream, "cublasSaxpy", [=] {
    for (int64_t i = 0; i < n; ++i) y[vector_index(i, n, incy)] += a * x[vector_index(i, n, incx)];
  });
  if (queued != cudaSuccess) return fail(CUBLAS_STATUS_EXECUTION_FAILED, "the handle's stream does not take work");
  return CUBLAS_STATUS_SUCCESS;
}

// y = alpha * op(A) x + beta * y.
cublasStatus_t cublasSgemv_v2(cublasHandle_t handle, cublasOperation_t trans, int m, int n, const float* alpha,
                              const float* A, int lda, const float* x, int incx, const float* beta, float* y,
                              int incy) {
  if (!handle) return fail(CUBLAS_STATUS_NOT_INITIALIZED, "the handle is null");
  if (!valid_op(trans)) return fail(CUBLAS_STATUS_INVALID_VALUE, "invalid operation");
  if (m < 0 || n < 0 || lda < std::max(1, m) || incx == 0 || incy == 0)
    return fail(CUBLAS_STATUS_INVALID_VALUE, "a negative dimension, lda below m, or a zero increment");
  if (!alpha || !beta) return fail(CUBLAS_STATUS_INVALID_VALUE, "alpha or beta is null");
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  const bool transposed = trans != CUBLAS_OP_N;
  const int64_t x_length = transposed ? m : n, y_length = transposed ? n : m;
  for (auto [p, elements, name] : {std::tuple{static_cast<const void*>(A), span(m, n, lda), "A"},
                                   std::tuple{static_cast<const void*>(x), vector_span(x_length, incx), "x"},
                                   std::tuple{static_cast<const void*>(y), vector_span(y_length, incy), "y"}})
    if (cublasStatus_t s = check_device(p, elements, sizeof(float), name); s != CUBLAS_STATUS_SUCCESS) return s;
  const Matrix a{A, CUDA_R_32F, lda, transposed};
  const float alpha_value = *alpha, beta_value = *beta;
  // A product y[y_length, 1] = op(A)[y_length, x_length] x[x_length, 1].
  if (recorded_product("cublasSgemv", handle->stream, y_length, 1, x_length, CUDA_R_32F, CUDA_R_32F, beta_value))
    return CUBLAS_STATUS_SUCCESS;
  const cudaError_t queued = enqueue(handle->stream, "cublasSgemv", [=] {
    for (int64_t i = 0; i < y_length; ++i) {
      float sum = 0.0f;
      for (int64_t p = 0; p < x_length; ++p) sum += a.at(i, p) * x[vector_index(p, x_length, incx)];
      blend(y, CUDA_R_32F, vector_index(i, y_length, incy), alpha_value, sum, beta_value);
    }
  });
  if (queued != cudaSuccess) return fail(CUBLAS_STATUS_EXECUTION_FAILED, "the handle's stream does not take work");
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                              int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                              const float* beta, float* C, int ldc) {
  return gemm("cublasSgemm", handle, transa, transb, m, n, k, alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb, beta, C,
              CUDA_R_32F, ldc);
}

// The combinations of cuBLAS's cublasGemmEx table that cutrain's types make: with CUBLAS_COMPUTE_32F
// (or its pedantic form) fp32 x fp32 -> fp32, and bf16 x bf16 -> bf16 or fp32; with the fast TF32
// compute type only fp32 throughout. Anything else is NOT_SUPPORTED, as cuBLAS answers. The
// emulation sums in fp32 for every one of them (no TF32 rounding), and needs the default algorithm.
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType a_type, int lda, const void* B,
                            cudaDataType b_type, int ldb, const void* beta, void* C, cudaDataType c_type, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  if (!handle) return fail(CUBLAS_STATUS_NOT_INITIALIZED, "the handle is null");
  const bool fp32 = a_type == CUDA_R_32F && b_type == CUDA_R_32F && c_type == CUDA_R_32F;
  const bool bf16 = a_type == CUDA_R_16BF && b_type == CUDA_R_16BF && (c_type == CUDA_R_16BF || c_type == CUDA_R_32F);
  const bool supported = compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC
                             ? fp32 || bf16
                             : compute == CUBLAS_COMPUTE_32F_FAST_TF32 && fp32;
  if (!supported) return fail(CUBLAS_STATUS_NOT_SUPPORTED, "this combination of data and compute types");
  if (algo != CUBLAS_GEMM_DEFAULT && algo != CUBLAS_GEMM_DEFAULT_TENSOR_OP)
    return fail(CUBLAS_STATUS_NOT_SUPPORTED, "the emulation runs the default algorithm only");
  return gemm("cublasGemmEx", handle, transa, transb, m, n, k, static_cast<const float*>(alpha), A, a_type, lda, B,
              b_type, ldb, static_cast<const float*>(beta), C, c_type, ldc);
}

}  // extern "C"
