#include "distmm/strategies/fsdp.hpp"

#include <algorithm>

#include "local_multiply.hpp"

namespace distmm {

template <Element T>
void scatter_column_shards(Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& b,
                           arma::Mat<T>& shard, int root) {
  if (comm.rank() == root) check_operand(b, shape.k, shape.n, "fsdp: B", comm.rank());
  if (comm.size() == 1) {
    std::copy(b.begin(), b.end(), shard.begin());
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
    : MatmulPlan<T>(comm, shape, root),
      shard_(this->allocate(shape.k, columns().count)),
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
  Communicator& comm = this->comm();
  if (comm.size() == 1) return shard_;
  comm.allgatherv(shard_, full_, counts_);
  return full_;
}

template <Element T>
void FsdpPlan<T>::multiply_rows(const T* a_rows_t, T* c_rows_t) {
  const MatmulShape& s = this->shape();
  RankStats& stats = this->comm().stats();
  const T* b = gather().memptr();
  const ParameterHold gathered(stats, gathered_bytes(), false);
  record_multiply(
      stats, rows_times_columns(stats, this->rows().count, s.k, s.n, a_rows_t, b, c_rows_t, s.n));
}

template class FsdpPlan<double>;
template class FsdpPlan<float>;
template void scatter_column_shards(Communicator&, const MatmulShape&, const arma::Mat<double>&,
                                    arma::Mat<double>&, int);
template void scatter_column_shards(Communicator&, const MatmulShape&, const arma::Mat<float>&,
                                    arma::Mat<float>&, int);

}  // namespace distmm
