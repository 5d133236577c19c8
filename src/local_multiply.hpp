#pragma once
// The local multiply every strategy ends in, with the shape checks that name the caller.
#include <armadillo>
#include <string>

#include "distmm/error.hpp"
#include "distmm/shape.hpp"

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

// rows x k times k x n: one BLAS call (gemm).
template <typename T>
arma::Mat<T> local_multiply(const arma::Mat<T>& a_rows, const arma::Mat<T>& b, std::size_t k,
                            int rank) {
  check_operand(a_rows, a_rows.n_rows, k, "local multiply: rows of A", rank);
  return a_rows * b;
}

// The one-rank case of every strategy: no communication at all.
template <typename T>
arma::Mat<T> single_rank_multiply(const MatmulShape& shape, const arma::Mat<T>& a,
                                  const arma::Mat<T>& b, const std::string& caller) {
  check_operand(a, shape.m, shape.k, caller + ": A", 0);
  check_operand(b, shape.k, shape.n, caller + ": B", 0);
  return a * b;
}

}  // namespace distmm
