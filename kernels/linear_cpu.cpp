// linear_cpu.cpp: the CPU reference of the classifier (linear_cpu.h), three Eigen products.
#include "kernels/linear_cpu.h"

#include "kernels/eigen_cpu.h"

namespace cutrain {

// y[N,O] = x[N,I] * W[O,I]^T + b
void linear_forward_cpu(const float* x, const float* w, const float* b, int N, int I, int O, float* y) {
  MatrixView out(y, N, O);
  out.noalias() = ConstMatrixView(x, N, I) * ConstMatrixView(w, O, I).transpose();
  out.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(b, O);
}

// dx = dy * W;  dW = beta*dW + dy^T * x;  db = beta*db + sum_n dy[n]
void linear_backward_cpu(const float* x, const float* w, const float* dy, int N, int I, int O, float beta, float* dx,
                         float* dw, float* db) {
  const ConstMatrixView input(x, N, I), weights(w, O, I), grad_out(dy, N, O);
  MatrixView(dx, N, I).noalias() = grad_out * weights;
  scale_by_beta(dw, int64_t(O) * I, beta);
  MatrixView(dw, O, I).noalias() += grad_out.transpose() * input;
  scale_by_beta(db, O, beta);
  Eigen::Map<Eigen::RowVectorXf>(db, O) += grad_out.colwise().sum();
}

}  // namespace cutrain
