#include "distmm/strategies/fsdp.hpp"

#include <algorithm>

#include "strategies/column_shards.hpp"

namespace distmm {

template <Element T>
void scatter_column_shards(Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& b,
                           arma::Mat<T>& shard, int root) {
  if (comm.rank() == root) check_operand(b, shape.k, shape.n, "fsdp: B", comm.rank());
  if (comm.size() == 1) {
    if (!comm.stats().dry()) std::copy(b.begin(), b.end(), shard.begin());
    return;
  }
  // A column shard of column-major B is contiguous: B's storage is the scatterv buffer.
  const auto counts = scaled(shard_counts(shape.n, comm.size()), shape.k);
  if (comm.rank() == root) {
    comm.scatterv(b, counts, shard, root);
  } else {
    comm.scatterv(std::span<const T>{}, counts, shard, root);
  }
}

template <Element T>
FsdpPlan<T>::FsdpPlan(Communicator& comm, const MatmulShape& shape, Unplaced, int root)
    : RowShardedPlan<T>(comm, shape, root),
      shard_(this->allocate_parameters(shape.k, columns().count)),
      // One rank's shard is all of B: nothing to gather into.
      full_(comm.size() > 1 ? this->allocate(shape.k, shape.n) : arma::Mat<T>()),
      counts_(scaled(shard_counts(shape.n, comm.size()), shape.k)),
      held_(comm.stats(), shard_.n_elem * sizeof(T), true) {}

template <Element T>
FsdpPlan<T>::FsdpPlan(Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& b, int root)
    : FsdpPlan(comm, shape, unplaced, root) {
  scatter_column_shards(comm, shape, b, shard_, root);
}

template <Element T>
const arma::Mat<T>& FsdpPlan<T>::gather() {
  return gather_columns(this->comm(), shard_, full_, counts_);
}

template <Element T>
void FsdpPlan<T>::multiply_rows(const T* a_rows_t, T* c_rows_t) {
  multiply_by_gathered(this->comm().stats(), this->shape(), this->rows().count, gather(),
                       gathered_bytes(), a_rows_t, c_rows_t);
}

template class FsdpPlan<double>;
template class FsdpPlan<float>;
template void scatter_column_shards(Communicator&, const MatmulShape&, const arma::Mat<double>&,
                                    arma::Mat<double>&, int);
template void scatter_column_shards(Communicator&, const MatmulShape&, const arma::Mat<float>&,
                                    arma::Mat<float>&, int);

}  // namespace distmm
