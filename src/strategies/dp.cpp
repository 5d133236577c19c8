#include "distmm/strategies/dp.hpp"

#include <algorithm>

#include "local_multiply.hpp"

namespace distmm {

template <Element T>
DpPlan<T>::DpPlan(Communicator& comm, const MatmulShape& shape, Unplaced, int root)
    : RowShardedPlan<T>(comm, shape, root),
      b_(this->allocate_parameters(shape.k, shape.n)),
      held_(comm.stats(), static_cast<std::uint64_t>(shape.k) * shape.n * sizeof(T), true) {}

template <Element T>
DpPlan<T>::DpPlan(Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& b, int root)
    : DpPlan(comm, shape, unplaced, root) {
  if (comm.rank() == root) {
    check_operand(b, shape.k, shape.n, "dp: B", comm.rank());
    if (!comm.stats().dry()) std::copy(b.begin(), b.end(), b_.begin());
  }
  if (comm.size() > 1) comm.broadcast(b_, root);
}

template <Element T>
void DpPlan<T>::multiply_rows(const T* a_rows_t, T* c_rows_t) {
  const MatmulShape& s = this->shape();
  RankStats& stats = this->comm().stats();
  record_multiply(stats, rows_times_columns(stats, this->rows().count, s.k, s.n, a_rows_t,
                                            b_.memptr(), c_rows_t, s.n));
}

template class DpPlan<double>;
template class DpPlan<float>;

}  // namespace distmm
