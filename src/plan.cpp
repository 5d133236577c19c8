#include "distmm/plan.hpp"

#include <atomic>
#include <memory>
#include <numeric>
#include <vector>

#include "distmm/dry_run.hpp"
#include "distmm/layout.hpp"
#include "distmm/memory.hpp"
#include "local_multiply.hpp"

namespace distmm {

template <Element T>
MatmulPlan<T>::MatmulPlan(Communicator& comm, const MatmulShape& shape, int root)
    : comm_(comm), shape_(shape), root_(root) {}

namespace {
std::atomic<std::uint64_t> kept_bytes{0};
}  // namespace

std::uint64_t abandoned_plan_bytes() {
  return kept_bytes.load();
}

template <Element T>
MatmulPlan<T>::~MatmulPlan() {
  if (storage_.empty() || !comm_.abandoned()) return;
  std::uint64_t bytes = 0;
  for (const auto& m : storage_) bytes += m->n_elem * sizeof(T);
  kept_bytes += bytes;
  (void)new std::vector<std::unique_ptr<arma::Mat<T>>>(std::move(storage_));  // never freed
}

template <Element T>
arma::Mat<T> MatmulPlan<T>::allocate(std::size_t rows, std::size_t cols) {
  const std::uint64_t bytes = static_cast<std::uint64_t>(rows) * cols * sizeof(T);
  allocated_ += bytes;
  // A dry run's plan asks nothing of its buffers but their sizes.
  if (comm_.stats().dry()) return no_memory_matrix<T>(rows, cols);
  if (bytes == 0) return arma::Mat<T>(rows, cols);
  // A view of memory the plan keeps (storage_), so that it can outlive the plan.
  storage_.push_back(std::make_unique<arma::Mat<T>>(fresh_matrix<T>(rows, cols)));
  return arma::Mat<T>(storage_.back()->memptr(), rows, cols, false, true);
}

template <Element T>
arma::Mat<T> MatmulPlan<T>::allocate_parameters(std::size_t rows, std::size_t cols) {
  parameters_ += static_cast<std::uint64_t>(rows) * cols * sizeof(T);
  return allocate(rows, cols);
}

template <Element T>
void MatmulPlan<T>::check_root_operands(const arma::Mat<T>& a_t, const arma::Mat<T>& c_t) const {
  check_operand(a_t, shape_.k, shape_.m, "plan: A^T (A row-major)", comm_.rank());
  check_operand(c_t, shape_.n, shape_.m, "plan: C^T (C row-major)", comm_.rank());
}

template <Element T>
RowShardedPlan<T>::RowShardedPlan(Communicator& comm, const MatmulShape& shape, int root)
    : MatmulPlan<T>(comm, shape, root),
      rows_(shard_of(shape.m, comm.size(), comm.rank())),
      a_counts_(scaled(shard_counts(shape.m, comm.size()), shape.k)),
      c_counts_(scaled(shard_counts(shape.m, comm.size()), shape.n)) {
  if (comm.rank() != root && comm.size() > 1) {
    a_rows_t_ = this->allocate(shape.k, rows_.count);
    c_rows_t_ = this->allocate(shape.n, rows_.count);
  }
}

template <Element T>
void RowShardedPlan<T>::execute(const arma::Mat<T>& a_t, arma::Mat<T>& c_t) {
  Communicator& comm = this->comm();
  const int r = comm.rank(), root = this->root();
  const MatmulShape& s = this->shape();
  if (r != root) {
    // Rank r's rows of A arrive in its buffer; its rows of C go back from its buffer.
    comm.scatterv(std::span<const T>{}, a_counts_, a_rows_t_, root);
    multiply_rows(a_rows_t_.memptr(), c_rows_t_.memptr());
    comm.gatherv(c_rows_t_, std::span<T>{}, c_counts_, root);
    return;
  }
  this->check_root_operands(a_t, c_t);
  // The root's rows stay in A and C: nothing of its own moves.
  if (comm.size() > 1) comm.scatterv(a_t, a_counts_, in_place, root);
  multiply_rows(a_t.memptr() + rows_.offset * s.k, c_t.memptr() + rows_.offset * s.n);
  if (comm.size() > 1) comm.gatherv(in_place, c_t, c_counts_, root);
}

template <Element T>
void RowShardedPlan<T>::execute_rows(const T* a_rows_t, T* c_rows_t) {
  multiply_rows(a_rows_t, c_rows_t);
}

PlanMemory plan_memory(const Strategy& s, const MatmulShape& shape, int ranks, int rank,
                       std::size_t element_bytes, int root, const StrategySettings& settings) {
  // The plan itself, set up dry (dry_run.hpp): it allocates nothing, and says what it would.
  RecordingCommunicator comm(rank, ranks);
  const auto measure = [&](auto zero) {
    using T = decltype(zero);
    const arma::Mat<T> b = rank == root ? no_memory_matrix<T>(shape.k, shape.n) : arma::Mat<T>();
    const auto plan = make_plan(s, comm, shape, b, root, settings);
    return PlanMemory{plan->allocated_bytes(), plan->parameter_bytes()};
  };
  return element_bytes == sizeof(float) ? measure(0.0f) : measure(0.0);
}

std::uint64_t plan_allocation(const Strategy& s, const MatmulShape& shape, int ranks, int rank,
                              std::size_t element_bytes, int root,
                              const StrategySettings& settings) {
  return plan_memory(s, shape, ranks, rank, element_bytes, root, settings).allocated_bytes;
}

template <Element T>
void DistributedPlan<T>::check_blocks(const arma::Mat<T>& a_t, const arma::Mat<T>& c_t) const {
  const int rank = comm_.rank();
  check_operand(a_t, blocks_.a.cols, blocks_.a.rows, "A's block (transposed)", rank);
  check_operand(c_t, blocks_.c.cols, blocks_.c.rows, "C's block (transposed)", rank);
}

template class DistributedPlan<double>;
template class DistributedPlan<float>;
template class MatmulPlan<double>;
template class MatmulPlan<float>;
template class RowShardedPlan<double>;
template class RowShardedPlan<float>;

}  // namespace distmm
