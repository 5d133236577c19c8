#pragma once
// FSDP with overlap ("collective matmul"): the parameter shards travel around a ring while
// each rank multiplies the shard it holds, so the full B is never materialized and the
// communication of step t+1's shard hides behind step t's multiply.
//
//   ranks hold A_r (rows) and B_r (columns, persistent), as in FSDP; P ring steps:
//   step t:  rank r multiplies A_r by the shard of rank s = (r - t) mod P, writing
//            C_r[:, cols of s]                                       (one gemm, helper thread)
//            and meanwhile passes that shard on to rank r+1 and receives shard s-1 from
//            rank r-1                                                (sendrecv, this thread)
//
//            step 0            step 1            step 2       (3 ranks)
//   rank 0   A0 B0 -> C0[:,0]  A0 B2 -> C0[:,2]  A0 B1 -> C0[:,1]
//   rank 1   A1 B1 -> C1[:,1]  A1 B0 -> C1[:,0]  A1 B2 -> C1[:,2]
//   rank 2   A2 B2 -> C2[:,2]  A2 B1 -> C2[:,1]  A2 B0 -> C2[:,0]
//
// Rank r receives sum over t = 1..P-1 of k n_{(r-t) mod P} = k (n - n_r) parameter elements,
// like FSDP's all-gather, but holds at most two ring buffers of the largest shard besides its
// own shard: peak k n_r + min(P - 1, 2) k max_s n_s instead of k n_r + k n. In row-major C_r
// the columns of shard s are rows of C_r^T, so each step's product lands in place.
#include <armadillo>
#include <memory>

#include "distmm/plan.hpp"
#include "distmm/stats.hpp"

namespace distmm {

class HelperThread;

template <Element T>
class FsdpOverlapPlan final : public RowShardedPlan<T> {
 public:
  // Scatters B's column shards (B k x n, read on `root` only), allocates the ring buffers and
  // starts the helper thread that multiplies. Collective.
  FsdpOverlapPlan(Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& b,
                  int root = 0);
  // Allocates the shard; the caller fills shard() on every rank before the first execution.
  FsdpOverlapPlan(Communicator& comm, const MatmulShape& shape, Unplaced, int root = 0);
  ~FsdpOverlapPlan() override;

  arma::Mat<T>& shard() { return shard_; }

 private:
  void multiply_rows(const T* a_rows_t, T* c_rows_t) override;

  arma::Mat<T> shard_;
  arma::Mat<T> ring_[2];
  std::size_t ring_buffers_ = 0;
  ParameterHold held_;
  std::unique_ptr<HelperThread> helper_;
};

}  // namespace distmm
