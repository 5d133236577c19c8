#pragma once
// Tensor parallelism, row-parallel (Megatron-LM's RowParallelLinear) C = A @ B: B's row
// shards are the persistent parameters, rank r holds the columns of A that match its rows of
// B, and the partial products, each m x n, are summed to the root.
//
//            rank 0               rank 1               rank 2
//   setup    B0,:                 B1,:                 B2,:            scatterv B's rows
//   ---- each execution ----
//   scatterv A:,0 (stays)         A:,1                 A:,2            A's columns
//   multiply P0 = A:,0 B0,:       P1 = A:,1 B1,:       P2 = A:,2 B2,:  one BLAS call per rank
//   reduce   C = P0 + P1 + P2     -                    -               summed into C in place
//
// Rank r holds k_r n parameter elements (k_r = shard_of(k, P, r).count) persistently and at
// its peak; per execution it receives m k_r of A and sends m n of partial C (the root
// receives (P - 1) m n). Every rank other than the root holds a whole m x n partial C.
//
// Layout: B is column-major, so a row shard of B is strided in it, and A is row-major
// (a_t = A^T), so a column block of A is strided too: both move as columns
// (Communicator::scatterv_columns). The root multiplies its columns of A where they are,
// into C.
#include <armadillo>
#include <vector>

#include "distmm/plan.hpp"
#include "distmm/stats.hpp"

namespace distmm {

template <Element T>
class TpRowPlan final : public MatmulPlan<T> {
 public:
  // Scatters B's row shards (B k x n, read on `root` only). Collective.
  TpRowPlan(Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& b, int root = 0);

  void execute(const arma::Mat<T>& a_t, arma::Mat<T>& c_t) override;

  // This rank's persistent parameters: rows rows_of_b() of B, stored transposed (B_r^T,
  // n x k_r, that is B_r row-major).
  const arma::Mat<T>& shard_t() const { return shard_t_; }
  Shard rows_of_b() const {
    return shard_of(this->shape().k, this->comm().size(), this->comm().rank());
  }

 private:
  arma::Mat<T> shard_t_;
  arma::Mat<T> a_block_, c_partial_t_;  // A's columns (m x k_r) and the partial C^T (n x m),
                                        // on ranks other than the root
  std::vector<std::size_t> counts_;
  ParameterHold held_;
};

}  // namespace distmm
