#pragma once
// Fully Sharded Data Parallel (FSDP) C = A @ B: each rank persistently holds only its shard
// of the parameters B, sharded by columns (column-major storage makes a column shard one
// contiguous block, so the all-gather lands the full B in place with no repacking).
//
//            rank 0            rank 1            rank 2
//   setup    B:,0 (columns)    B:,1              B:,2          scatterv: persistent shards
//   ---- each execution ----
//   scatterv A0 (stays)        A1                A2
//   allgath  B                 B                 B             full B, temporarily
//   multiply C0 = A0 B         C1 = A1 B         C2 = A2 B
//   release  B:,0              B:,1              B:,2          back to the shard only
//   gatherv  C = [C0;C1;C2]    -                 -
//
// Rank r holds k n_r parameter elements persistently and k n at its peak; it receives
// k n_r once when B is sharded, then per execution m_r k elements of A and k (n - n_r) in
// the all-gather. The plan keeps the gather buffer between executions (no allocation per
// call); the memory counters count it as held only while the gathered B is in use.
#include <armadillo>
#include <vector>

#include "distmm/plan.hpp"
#include "distmm/stats.hpp"

namespace distmm {

template <Element T>
class FsdpPlan final : public RowShardedPlan<T> {
 public:
  // Scatters B's column shards (B k x n, read on `root` only). Collective.
  FsdpPlan(Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& b, int root = 0);
  // Allocates the shard; the caller fills shard() on every rank before the first execution.
  FsdpPlan(Communicator& comm, const MatmulShape& shape, Unplaced, int root = 0);

  // This rank's persistent parameters: columns columns() of B (k x n_r).
  arma::Mat<T>& shard() { return shard_; }
  Shard columns() const {
    return shard_of(this->shape().n, this->comm().size(), this->comm().rank());
  }
  // All-gathers the full B (k x n) from every rank's shard into the plan's buffer. Collective.
  const arma::Mat<T>& gather();
  std::uint64_t gathered_bytes() const { return full_.n_elem * sizeof(T); }

 private:
  void multiply_rows(const T* a_rows_t, T* c_rows_t) override;

  arma::Mat<T> shard_, full_;
  std::vector<std::size_t> counts_;
  ParameterHold held_;
};

// Column shards of B (k x n, read on `root` only) for a sharded plan: rank r's columns
// shard_of(n, P, r) land in `shard` (k x n_r).
template <Element T>
void scatter_column_shards(Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& b,
                           arma::Mat<T>& shard, int root);

}  // namespace distmm
