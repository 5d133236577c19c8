#pragma once
// Fully Sharded Data Parallel (FSDP) C = A @ B: each rank persistently holds only its shard
// of the parameters B, sharded by columns (column-major storage makes a column shard one
// contiguous block, so the all-gather lands the full B in place with no repacking).
//
//            rank 0            rank 1            rank 2
//   start    A, B              -                 -
//   shard    B:,0 (columns)    B:,1              B:,2          persistent parameter shards
//   scatterv A0 (rows)         A1                A2
//   allgath  B                 B                 B             full B, temporarily
//   multiply C0 = A0 B         C1 = A1 B         C2 = A2 B
//   free     B:,0              B:,1              B:,2          back to the shard only
//   gatherv  C = [C0;C1;C2]    -                 -
//
// Rank r holds k n_r parameter elements persistently and k n at its peak; it receives
// m_r k elements of A, k n_r when B is sharded and k (n - n_r) in the all-gather.
#include <armadillo>

#include "distmm/communicator.hpp"
#include "distmm/shape.hpp"

namespace distmm {

// Rank r's persistent parameters: columns shard_of(n, size, r) of B.
template <Element T>
struct ParameterShard {
  std::size_t k = 0;     // rows of the full B
  std::size_t n = 0;     // columns of the full B
  arma::Mat<T> columns;  // k x n_r
};

// Splits B (k x n, read on `root` only) into the ranks' column shards.
template <Element T>
ParameterShard<T> shard_parameters(Communicator& comm, const arma::Mat<T>& b, std::size_t k,
                                   std::size_t n, int root = 0);

// The full B, all-gathered from every rank's shard.
template <Element T>
arma::Mat<T> gather_parameters(Communicator& comm, const ParameterShard<T>& shard);

// A (m x k) and B (k x n) are read on `root` only; returns C on `root`, an empty matrix
// elsewhere. With one rank: a single local multiply, no communication.
template <Element T>
arma::Mat<T> fsdp_matmul(Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& a,
                         const arma::Mat<T>& b, int root = 0);

// The forward step alone, for ranks that already hold their rows of A and their shard.
template <Element T>
arma::Mat<T> fsdp_matmul_rows(Communicator& comm, const arma::Mat<T>& a_rows,
                              const ParameterShard<T>& shard);

}  // namespace distmm
