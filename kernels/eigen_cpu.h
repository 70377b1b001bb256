// eigen_cpu.h: row-major Eigen views of our buffers for the CPU classifier's matrix products
// (linear_cpu.cpp), and cuDNN/cuBLAS's beta convention for outputs that may accumulate, which the CPU
// convolution (conv2d_cpu.cpp) follows too.
#pragma once

// Eigen's own threads would split a product by the thread count, and with it the order of its
// sums: the CPU path's threads are cpu_threads.h's instead (Note [Fixed work split]), and every
// Eigen product runs on the one thread that calls it.
#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Core>

#include <algorithm>
#include <cstdint>

namespace cutrain {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixView = Eigen::Map<RowMatrix>;
using ConstMatrixView = Eigen::Map<const RowMatrix>;

// out = beta*out, where beta = 0 overwrites without reading (old NaNs do not survive) and
// beta = 1 leaves out alone; the product is then added on top.
inline void scale_by_beta(float* out, int64_t n, float beta) {
  if (beta == 0.0f) {
    std::fill_n(out, n, 0.0f);
  } else if (beta != 1.0f) {
    for (int64_t i = 0; i < n; ++i) out[i] *= beta;
  }
}

}  // namespace cutrain
