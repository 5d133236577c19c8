#include "distmm/strategies/tp_col.hpp"

#include <span>

#include "distmm/strategies/fsdp.hpp"
#include "local_multiply.hpp"

namespace distmm {

template <Element T>
TpColPlan<T>::TpColPlan(Communicator& comm, const MatmulShape& shape, Unplaced, int root)
    : MatmulPlan<T>(comm, shape, root),
      shard_(this->allocate_parameters(shape.k, columns().count)),
      counts_(shard_counts(shape.n, comm.size())),
      held_(comm.stats(), shard_.n_elem * sizeof(T), true) {
  if (comm.rank() != root && comm.size() > 1) {
    a_t_ = this->allocate(shape.k, shape.m);
    c_block_ = this->allocate(shape.m, columns().count);
  }
}

template <Element T>
TpColPlan<T>::TpColPlan(Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& b,
                        int root)
    : TpColPlan(comm, shape, unplaced, root) {
  scatter_column_shards(comm, shape, b, shard_, root);
}

template <Element T>
void TpColPlan<T>::execute(const arma::Mat<T>& a_t, arma::Mat<T>& c_t) {
  Communicator& comm = this->comm();
  RankStats& stats = comm.stats();
  const MatmulShape& s = this->shape();
  const int root = this->root();
  const Shard mine = columns();
  const RowMajor c_layout{s.m, s.n};  // C row-major: its columns are what the ranks compute
  if (comm.rank() != root) {
    comm.broadcast(a_t_, root);
    multiply_columns(a_t_.memptr(), c_block_.memptr());
    comm.gatherv_columns(c_block_, std::span<T>{}, c_layout, counts_, root);
    return;
  }
  this->check_root_operands(a_t, c_t);
  // The broadcast only reads the root's buffer.
  if (comm.size() > 1) comm.broadcast(std::span<T>(const_cast<T*>(a_t.memptr()), a_t.n_elem), root);
  // The root's columns of C straight into C: rows mine of C^T (n_r x m, leading dimension n)
  // = B_r^T A^T.
  record_multiply(stats, timed_multiply(stats, s.m, s.k, mine.count, [&] {
                    gemm(true, false, mine.count, s.m, s.k, shard_.memptr(), s.k, a_t.memptr(), s.k,
                         c_t.memptr() + mine.offset, s.n);
                  }));
  if (comm.size() > 1) comm.gatherv_columns(in_place, c_t, c_layout, counts_, root);
}

template <Element T>
void TpColPlan<T>::multiply_columns(const T* a_t, T* c_block) {
  RankStats& stats = this->comm().stats();
  const MatmulShape& s = this->shape();
  const std::size_t columns = shard_.n_cols;
  // C_r (m x n_r, column-major) = A B_r = (A^T)^T B_r.
  record_multiply(stats, timed_multiply(stats, s.m, s.k, columns, [&] {
                    gemm(true, false, s.m, columns, s.k, a_t, s.k, shard_.memptr(), s.k, c_block,
                         s.m);
                  }));
}

template class TpColPlan<double>;
template class TpColPlan<float>;

}  // namespace distmm
