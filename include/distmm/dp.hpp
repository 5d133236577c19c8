#pragma once
// Data Parallel (DP) C = A @ B: every rank holds all of the parameters B.
//
//            rank 0            rank 1            rank 2
//   start    A, B              -                 -
//   scatterv A0 (rows)         A1                A2            rows of A, balanced
//   bcast    B                 B                 B             every rank: all of B
//   multiply C0 = A0 B         C1 = A1 B         C2 = A2 B     one BLAS call per rank
//   gatherv  C = [C0;C1;C2]    -                 -
//
// Rank r receives |A_r| = m_r k elements of A and k n of B; it holds k n parameter elements
// persistently and at its peak.
#include <armadillo>

#include "distmm/communicator.hpp"
#include "distmm/shape.hpp"

namespace distmm {

// A (m x k) and B (k x n) are read on `root` only; returns C on `root`, an empty matrix
// elsewhere. With one rank: a single local multiply, no communication.
template <Element T>
arma::Mat<T> dp_matmul(Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& a,
                       const arma::Mat<T>& b, int root = 0);

// For callers whose ranks already hold their own rows of A (a_rows: m_r x k on rank r, any
// m_r): B (k x n) is broadcast from `root`, and each rank gets back its own rows of C.
template <Element T>
arma::Mat<T> dp_matmul_rows(Communicator& comm, const arma::Mat<T>& a_rows, const arma::Mat<T>& b,
                            std::size_t k, std::size_t n, int root = 0);

}  // namespace distmm
