#pragma once
// Tensor parallelism, column-parallel (Megatron-LM's ColumnParallelLinear) C = A @ B: B's
// column shards are the persistent parameters, A is replicated, and rank r computes C's
// columns of its shard.
//
//            rank 0               rank 1               rank 2
//   setup    B:,0                 B:,1                 B:,2            scatterv B's columns
//   ---- each execution ----
//   bcast A  A                    A                    A               all of A, every rank
//   multiply C:,0 = A B:,0        C:,1 = A B:,1        C:,2 = A B:,2   one BLAS call per rank
//   gatherv  C = [C:,0 C:,1 C:,2] -                    -               C:,0 written in place
//
// Rank r holds k n_r parameter elements (n_r = shard_of(n, P, r).count) persistently and at
// its peak; per execution it receives m k of A and sends m n_r of C. What moves grows with
// the batch m (A and C), not with the parameters k n: the opposite of FSDP.
//
// Layout: C is row-major (c_t = C^T), so C's column block of rank r is strided in it; the
// gather places each rank's block (m x n_r, column-major) there
// (Communicator::gatherv_columns). The root computes its block straight into C.
#include <armadillo>
#include <vector>

#include "distmm/plan.hpp"
#include "distmm/stats.hpp"

namespace distmm {

template <Element T>
class TpColPlan final : public MatmulPlan<T> {
 public:
  // Scatters B's column shards (B k x n, read on `root` only). Collective.
  TpColPlan(Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& b, int root = 0);
  // Allocates the shard; the caller fills shard() on every rank before the first execution.
  TpColPlan(Communicator& comm, const MatmulShape& shape, Unplaced, int root = 0);

  void execute(const arma::Mat<T>& a_t, arma::Mat<T>& c_t) override;

  // This rank's columns alone, for callers whose ranks all hold all of A (training):
  // c_block (m x n_r, column-major) = A B_r from a_t = A^T (k x m). Local: no communication.
  void multiply_columns(const T* a_t, T* c_block);

  // This rank's persistent parameters: columns columns() of B (k x n_r).
  arma::Mat<T>& shard() { return shard_; }
  Shard columns() const {
    return shard_of(this->shape().n, this->comm().size(), this->comm().rank());
  }

 private:
  arma::Mat<T> shard_;
  arma::Mat<T> a_t_, c_block_;  // A^T and C's columns of this shard, on ranks other than the root
  std::vector<std::size_t> counts_;
  ParameterHold held_;
};

}  // namespace distmm
