#pragma once
// The local multiplies every strategy ends in: one BLAS call each (through Armadillo's BLAS
// wrapper), on buffers the caller owns, timed into the rank's stats.
#include <algorithm>
#include <armadillo>
#include <string>

#include "distmm/communicator.hpp"
#include "distmm/error.hpp"

namespace distmm {

template <typename T>
void check_operand(const arma::Mat<T>& x, std::size_t rows, std::size_t cols,
                   const std::string& what, int rank) {
  if (x.n_rows != rows || x.n_cols != cols) {
    throw Error(what + " is " + std::to_string(x.n_rows) + "x" + std::to_string(x.n_cols) +
                    ", expected " + std::to_string(rows) + "x" + std::to_string(cols),
                rank, what);
  }
}

// c (rows x cols, column-major, leading dimension ldc) = op(a) op(b), where op(a) is
// rows x inner and op(b) inner x cols, each stored transposed when ta / tb; with `accumulate`,
// c += op(a) op(b). One BLAS gemm.
template <typename T>
void gemm(bool ta, bool tb, std::size_t rows, std::size_t cols, std::size_t inner, const T* a,
          std::size_t lda, const T* b, std::size_t ldb, T* c, std::size_t ldc,
          bool accumulate = false) {
  if (rows == 0 || cols == 0 || (inner == 0 && accumulate)) return;
  if (inner == 0) {  // an empty sum: C = 0 (BLAS implementations differ here)
    for (std::size_t j = 0; j < cols; ++j) std::fill(c + j * ldc, c + j * ldc + rows, T(0));
    return;
  }
  using arma::blas_int;
  const auto dim = [](std::size_t x) { return static_cast<blas_int>(std::max<std::size_t>(1, x)); };
  const blas_int m = static_cast<blas_int>(rows), n = static_cast<blas_int>(cols),
                 k = static_cast<blas_int>(inner), la = dim(lda), lb = dim(ldb), lc = dim(ldc);
  const T one = 1, beta = accumulate ? 1 : 0;
  arma::blas::gemm<T>(ta ? "T" : "N", tb ? "T" : "N", &m, &n, &k, &one, a, &la, b, &lb, &beta, c,
                      &lc);
}

// C_r = A_r B_part in row-major form: c_t (cols x rows, leading dimension ldc) = B_part^T A_r^T
// with b_part k x cols (leading dimension k) and a_t = A_r^T (k x rows). Timed, not recorded.
template <typename T>
TraceEvent rows_times_columns(const RankStats& stats, std::size_t rows, std::size_t k,
                              std::size_t cols, const T* a_t, const T* b_part, T* c_t,
                              std::size_t ldc) {
  return timed_multiply(stats, rows, k, cols,
                        [&] { gemm(true, false, cols, rows, k, b_part, k, a_t, k, c_t, ldc); });
}

// Registers a matrix of parameters with the rank's memory counters while it lives.
template <typename T>
ParameterHold hold(Communicator& comm, const arma::Mat<T>& params, bool persistent) {
  return ParameterHold(comm.stats(), params.n_elem * sizeof(T), persistent);
}

}  // namespace distmm
