#pragma once
// Hybrid Sharded Data Parallel (HSDP, as FSDP2 on a 2-D device mesh) C = A @ B: the P ranks
// form an R x S mesh of R replica groups of S ranks each (S = P / R; rank r is in shard group
// r / S at shard index r % S). Within each shard group B is sharded by columns as in FSDP;
// the R groups hold the same shards (replicas). Ranks of one host usually form a shard
// group, so the all-gathers stay within a host.
//
//   R = 2, S = 2      rank 0            rank 1            rank 2            rank 3
//   setup             B:,0              B:,1              .                 .        scatterv in
//   group 0
//                     B:,0  --------------------------->  B:,0                       broadcast
//                     across
//                                       B:,1  --------------------------->  B:,1     replicas
//   ---- each execution ----
//   scatterv A        A0 (stays)        A1                A2                A3       rows, over all
//   P allgather B       B (from 0,1)      B (from 0,1)      B (from 2,3)      B (2,3)  within the
//   group multiply          C0 = A0 B         C1 = A1 B         C2 = A2 B         C3 = A3 B gatherv
//   C         C = [C0;C1;C2;C3] -                 -                 -
//
// Rank r holds k n_i parameter elements persistently (n_i = shard_of(n, S, i).count) and
// k n at its peak; per execution it receives k (n - n_i) in the group's all-gather, against
// k (n - n_r) for FSDP over all P ranks. R = 1 is FSDP; R = P is DP (every rank holds B).
#include <armadillo>
#include <memory>
#include <vector>

#include "distmm/plan.hpp"
#include "distmm/stats.hpp"

namespace distmm {

// The R x S mesh of `ranks` ranks (R dividing ranks): where rank r sits.
struct Mesh {
  int replicas = 1, group_size = 1;  // R, S
  int group_of(int r) const { return r / group_size; }
  int index_of(int r) const { return r % group_size; }
};
// Throws InputError unless 1 <= replicas and replicas divides ranks.
Mesh make_mesh(int ranks, int replicas);

template <Element T>
class HsdpPlan final : public RowShardedPlan<T> {
 public:
  // Splits the communicator into shard groups and replica groups, scatters B's column shards
  // (B k x n, read on `root` only) within the root's group and broadcasts them to the other
  // replicas. Collective.
  HsdpPlan(Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& b, int replicas,
           int root = 0);
  // Splits the communicator and allocates the shard; the caller fills shard() on every rank
  // before the first execution.
  HsdpPlan(Communicator& comm, const MatmulShape& shape, Unplaced, int replicas, int root = 0);

  const Mesh& mesh() const { return mesh_; }
  // This rank's persistent parameters: columns columns() of B (k x n_i).
  arma::Mat<T>& shard() { return shard_; }
  Shard columns() const { return shard_of(this->shape().n, mesh_.group_size, index()); }
  Communicator& shard_group() { return *shard_comm_; }
  Communicator& replica_group() { return *replica_comm_; }
  // All-gathers the full B (k x n) within the shard group into the plan's buffer.
  const arma::Mat<T>& gather();
  std::uint64_t gathered_bytes() const { return full_.n_elem * sizeof(T); }

 private:
  void multiply_rows(const T* a_rows_t, T* c_rows_t) override;
  int index() const { return mesh_.index_of(this->comm().rank()); }

  Mesh mesh_;
  std::unique_ptr<Communicator> shard_comm_, replica_comm_;
  arma::Mat<T> shard_, full_;
  std::vector<std::size_t> counts_;
  ParameterHold held_;
};

}  // namespace distmm
