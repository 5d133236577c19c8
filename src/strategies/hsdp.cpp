#include "distmm/strategies/hsdp.hpp"

#include <string>

#include "distmm/error.hpp"
#include "distmm/strategies/fsdp.hpp"
#include "strategies/column_shards.hpp"

namespace distmm {

Mesh make_mesh(int ranks, int replicas) {
  if (replicas < 1 || ranks % replicas != 0) {
    throw InputError("--replicas " + std::to_string(replicas) + ": does not divide the " +
                         std::to_string(ranks) + " ranks (hsdp's mesh is replicas x shards)",
                     -1, "--replicas");
  }
  return Mesh{replicas, ranks / replicas};
}

template <Element T>
HsdpPlan<T>::HsdpPlan(Communicator& comm, const MatmulShape& shape, Unplaced, int replicas,
                      int root)
    : RowShardedPlan<T>(comm, shape, root),
      mesh_(make_mesh(comm.size(), replicas)),
      shard_comm_(comm.split([m = mesh_](int r) {
        return Communicator::ColorKey{m.group_of(r), m.index_of(r)};
      })),
      replica_comm_(comm.split([m = mesh_](int r) {
        return Communicator::ColorKey{m.index_of(r), m.group_of(r)};
      })),
      shard_(this->allocate_parameters(shape.k, columns().count)),
      // A group of one holds all of B: nothing to gather into.
      full_(mesh_.group_size > 1 ? this->allocate(shape.k, shape.n) : arma::Mat<T>()),
      counts_(scaled(shard_counts(shape.n, mesh_.group_size), shape.k)),
      held_(comm.stats(), shard_.n_elem * sizeof(T), true) {}

template <Element T>
HsdpPlan<T>::HsdpPlan(Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& b,
                      int replicas, int root)
    : HsdpPlan(comm, shape, unplaced, replicas, root) {
  // The root's group receives the shards; then each shard goes to its replicas.
  if (mesh_.group_of(comm.rank()) == mesh_.group_of(root)) {
    scatter_column_shards(*shard_comm_, shape, b, shard_, mesh_.index_of(root));
  }
  if (mesh_.replicas > 1) replica_comm_->broadcast(shard_, mesh_.group_of(root));
}

template <Element T>
const arma::Mat<T>& HsdpPlan<T>::gather() {
  return gather_columns(*shard_comm_, shard_, full_, counts_);
}

template <Element T>
void HsdpPlan<T>::multiply_rows(const T* a_rows_t, T* c_rows_t) {
  multiply_by_gathered(this->comm().stats(), this->shape(), this->rows().count, gather(),
                       gathered_bytes(), a_rows_t, c_rows_t);
}

template class HsdpPlan<double>;
template class HsdpPlan<float>;

}  // namespace distmm
