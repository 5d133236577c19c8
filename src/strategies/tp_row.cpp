#include "distmm/strategies/tp_row.hpp"

#include <optional>
#include <span>

#include "distmm/layout.hpp"
#include "distmm/memory.hpp"
#include "local_multiply.hpp"

#include "distmm/strategy_of.hpp"
#include "strategies/builtin.hpp"

namespace distmm {

template <Element T>
TpRowPlan<T>::TpRowPlan(Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& b,
                        int root)
    : MatmulPlan<T>(comm, shape, root),
      shard_t_(this->allocate_parameters(shape.n, rows_of_b().count)),
      counts_(shard_counts(shape.k, comm.size())),
      held_(comm.stats(), shard_t_.n_elem * sizeof(T), true) {
  if (comm.rank() != root && comm.size() > 1) {
    a_block_ = this->allocate(shape.m, rows_of_b().count);
    c_partial_t_ = this->allocate(shape.n, shape.m);
  }
  const bool at_root = comm.rank() == root;
  if (at_root) check_operand(b, shape.k, shape.n, "tp-row: B", comm.rank());
  if (comm.size() == 1) {
    if (!comm.stats().dry()) shard_t_ = b.t();
    return;
  }
  // Column-major B is B^T row-major (n x k): B's rows are that matrix's columns.
  const RowMajor b_t{shape.n, shape.k};
  if (at_root) {
    comm.scatterv_columns(b, b_t, counts_, shard_t_, root);
  } else {
    comm.scatterv_columns(std::span<const T>{}, b_t, counts_, shard_t_, root);
  }
}

template <Element T>
void TpRowPlan<T>::execute(const arma::Mat<T>& a_t, arma::Mat<T>& c_t) {
  Communicator& comm = this->comm();
  RankStats& stats = comm.stats();
  const MatmulShape& s = this->shape();
  const int root = this->root();
  const Shard mine = rows_of_b();
  const RowMajor a_layout{s.m, s.k};  // A row-major: its columns match B's rows
  if (comm.rank() != root) {
    comm.scatterv_columns(std::span<const T>{}, a_layout, counts_, a_block_, root);
    // The partial C^T (n x m) = B_r^T A_r^T, A_r being A's columns (m x k_r).
    record_multiply(stats, timed_multiply(stats, s.m, mine.count, s.n, [&] {
                      gemm(false, true, s.n, s.m, mine.count, shard_t_.memptr(), s.n,
                           a_block_.memptr(), s.m, c_partial_t_.memptr(), s.n);
                    }));
    comm.reduce_sum(c_partial_t_, root);
    return;
  }
  this->check_root_operands(a_t, c_t);
  if (comm.size() > 1) comm.scatterv_columns(a_t, a_layout, counts_, in_place, root);
  // The root's partial product straight into C: A_r^T is rows mine of A^T (k_r x m, leading
  // dimension k), where it is.
  record_multiply(stats, timed_multiply(stats, s.m, mine.count, s.n, [&] {
                    gemm(false, false, s.n, s.m, mine.count, shard_t_.memptr(), s.n,
                         a_t.memptr() + mine.offset, s.k, c_t.memptr(), s.n);
                  }));
  if (comm.size() > 1) comm.reduce_sum(c_t, root);
}

template class TpRowPlan<double>;
template class TpRowPlan<float>;

namespace {

// The distributed layout: rank r has A's columns K_r, B's rows K_r, and ends with C's rows R_r.
BlockLayout tp_row_blocks(const MatmulShape& s, int ranks, int rank) {
  const Shard inner = shard_of(s.k, ranks, rank), rows = shard_of(s.m, ranks, rank);
  return {{0, s.m, inner.offset, inner.count},
          {inner.offset, inner.count, 0, s.n},
          {rows.offset, rows.count, 0, s.n}};
}

// Each execution: the partial product of the rank's inner slice, P_r^T (n x m) = B_r^T A_r^T,
// then the partial products reduce-scattered by C's rows (the root layout reduces them all to
// the root).
template <Element T>
class TpRowDistributedPlan final : public DistributedPlan<T> {
 public:
  TpRowDistributedPlan(Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& b_block)
      : DistributedPlan<T>(comm, shape, tp_row_blocks(shape, comm.size(), comm.rank())),
        counts_(scaled(shard_counts(shape.m, comm.size()), shape.n)) {
    const Block& b = this->blocks().b;
    check_operand(b_block, b.rows, b.cols, "B's block", comm.rank());
    const bool dry = comm.stats().dry();
    // (Armadillo's transpose of an empty block reads a null pointer.)
    shard_t_ = dry || b_block.n_elem == 0 ? no_memory_matrix<T>(b.cols, b.rows)
                                          : arma::Mat<T>(b_block.t());
    held_.emplace(comm.stats(), shard_t_.n_elem * sizeof(T), true);
    // One rank: its partial product is C, written in place.
    if (comm.size() > 1) {
      partial_t_ = dry ? no_memory_matrix<T>(shape.n, shape.m) : fresh_matrix<T>(shape.n, shape.m);
    }
    this->count_allocated((shard_t_.n_elem + partial_t_.n_elem) * sizeof(T));
  }
  void execute(const arma::Mat<T>& a_t, arma::Mat<T>& c_t) override {
    this->check_blocks(a_t, c_t);
    Communicator& comm = this->comm();
    RankStats& stats = comm.stats();
    const MatmulShape& s = this->shape();
    const std::size_t inner = shard_t_.n_cols;
    T* into = comm.size() > 1 ? partial_t_.memptr() : c_t.memptr();
    record_multiply(stats, timed_multiply(stats, s.m, inner, s.n, [&] {
                      gemm(false, false, s.n, s.m, inner, shard_t_.memptr(), s.n, a_t.memptr(),
                           inner, into, s.n);
                    }));
    if (comm.size() > 1) comm.reduce_scatter_sum(partial_t_, c_t, counts_);
  }

 private:
  arma::Mat<T> shard_t_, partial_t_;
  std::vector<std::size_t> counts_;
  std::optional<ParameterHold> held_;
};

class TpRowStrategy final : public StrategyOf<TpRowStrategy> {
 public:
  std::string_view name() const override { return "tp-row"; }
  std::string_view description() const override {
    return "row-parallel tensor parallelism: B sharded by rows, A by columns, C summed by a reduce";
  }
  template <Element T>
  std::unique_ptr<MatmulPlan<T>> make_plan(Communicator& comm, const MatmulShape& shape,
                                           const arma::Mat<T>& b, int root,
                                           const StrategySettings&) const {
    return std::make_unique<TpRowPlan<T>>(comm, shape, b, root);
  }
  std::optional<BlockLayout> distributed_blocks(const MatmulShape& shape, int ranks, int rank,
                                                const StrategySettings&) const override {
    return tp_row_blocks(shape, ranks, rank);
  }
  template <Element T>
  std::unique_ptr<DistributedPlan<T>> make_distributed_plan(Communicator& comm,
                                                            const MatmulShape& shape,
                                                            const arma::Mat<T>& b_block,
                                                            const StrategySettings&) const {
    return std::make_unique<TpRowDistributedPlan<T>>(comm, shape, b_block);
  }
};

}  // namespace

std::unique_ptr<Strategy> make_tp_row_strategy() {
  return std::make_unique<TpRowStrategy>();
}

}  // namespace distmm
