#include "distmm/strategies/tp_col.hpp"

#include <optional>
#include <span>

#include "distmm/layout.hpp"
#include "distmm/memory.hpp"
#include "distmm/strategies/fsdp.hpp"
#include "distmm/strategy_of.hpp"
#include "local_multiply.hpp"
#include "strategies/builtin.hpp"

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

namespace {

// The distributed layout: rank r has A's rows R_r, B's columns N_r and ends with C's columns
// N_r (all rows).
BlockLayout tp_col_blocks(const MatmulShape& s, int ranks, int rank) {
  const Shard rows = shard_of(s.m, ranks, rank), cols = shard_of(s.n, ranks, rank);
  return {{rows.offset, rows.count, 0, s.k},
          {0, s.k, cols.offset, cols.count},
          {0, s.m, cols.offset, cols.count}};
}

// Each execution all-gathers A (its rows from every rank; the root layout broadcasts it), then
// one multiply: C_:,r^T (n_r x m) = B_r^T A^T.
template <Element T>
class TpColDistributedPlan final : public DistributedPlan<T> {
 public:
  TpColDistributedPlan(Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& b_block)
      : DistributedPlan<T>(comm, shape, tp_col_blocks(shape, comm.size(), comm.rank())),
        counts_(scaled(shard_counts(shape.m, comm.size()), shape.k)) {
    const Block& b = this->blocks().b;
    check_operand(b_block, b.rows, b.cols, "B's block", comm.rank());
    const bool dry = comm.stats().dry();
    shard_ = dry ? no_memory_matrix<T>(b.rows, b.cols) : arma::Mat<T>(b_block);
    a_all_t_ = dry ? no_memory_matrix<T>(shape.k, shape.m) : fresh_matrix<T>(shape.k, shape.m);
    held_.emplace(comm.stats(), shard_.n_elem * sizeof(T), true);
    this->count_allocated((shard_.n_elem + a_all_t_.n_elem) * sizeof(T));
  }
  void execute(const arma::Mat<T>& a_t, arma::Mat<T>& c_t) override {
    this->check_blocks(a_t, c_t);
    Communicator& comm = this->comm();
    RankStats& stats = comm.stats();
    const MatmulShape& s = this->shape();
    comm.allgatherv(a_t, a_all_t_, counts_);
    const std::size_t cols = shard_.n_cols;
    record_multiply(stats, timed_multiply(stats, s.m, s.k, cols, [&] {
                      gemm(true, false, cols, s.m, s.k, shard_.memptr(), s.k, a_all_t_.memptr(),
                           s.k, c_t.memptr(), cols);
                    }));
  }

 private:
  arma::Mat<T> shard_, a_all_t_;
  std::vector<std::size_t> counts_;
  std::optional<ParameterHold> held_;
};

// TP-COL's training step (Megatron's column-parallel layer): X replicated on every rank, W
// sharded by columns, T by the same columns. Per step: forward Y_:,r = X W_r, the residual of
// its columns, the weight gradient G_r = X^T R_:,r (local: no gradient communication), and the
// input gradient dX = sum_r R_:,r W_r^T by an all-reduce (m x k).
template <Element T>
class TpColStep final : public TrainingStep<T> {
 public:
  explicit TpColStep(const TrainingSetup<T>& s)
      : TrainingStep<T>(s.comm),
        comm_(s.comm),
        root_(s.root),
        plan_(s.resuming ? std::make_unique<TpColPlan<T>>(s.comm, s.shape, unplaced, s.root)
                         : std::make_unique<TpColPlan<T>>(s.comm, s.shape, s.w0, s.root)),
        m_(s.shape.m),
        k_(s.shape.k),
        columns_(plan_->columns().count),
        // X^T (k x m): the root's own, a copy on every other rank.
        x_copy_(s.comm.rank() == s.root ? arma::Mat<T>()
                                        : this->memory().template matrix<T>(k_, m_)),
        x_all_(s.comm.rank() == s.root ? s.x_t.memptr() : x_copy_.memptr()),
        t_columns_(this->memory().template matrix<T>(m_, columns_)),
        residual_(this->memory().template matrix<T>(m_, columns_)),
        input_grad_t_(this->memory().template matrix<T>(k_, m_)),
        gradient_(this->memory().template matrix<T>(k_, columns_)),
        gradient_hold_(hold(s.comm, gradient_, true)),
        optimizer_(s.config, k_, columns_, this->memory()),
        state_hold_(s.comm.stats(), optimizer_.bytes(), true),
        loss_(1) {
    const int p = s.comm.size();
    s.comm.broadcast(std::span<T>(const_cast<T*>(x_all_), k_ * m_), s.root);  // read at the root
    const RowMajor t_layout{m_, s.shape.n};  // T row-major: each rank's columns of it
    if (s.comm.rank() == s.root) {
      s.comm.scatterv_columns(s.t_t, t_layout, shard_counts(s.shape.n, p), t_columns_, s.root);
    } else {
      s.comm.scatterv_columns(std::span<const T>{}, t_layout, shard_counts(s.shape.n, p),
                              t_columns_, s.root);
    }
    this->count_plan(*plan_);
    this->count_optimizer_state(optimizer_.bytes());
  }

  double step() override {
    RankStats& stats = comm_.stats();
    arma::Mat<T>& shard = plan_->shard();
    plan_->multiply_columns(x_all_, residual_.memptr());  // Y_:,r = X W_r
    if (!stats.dry()) {
      residual_ -= t_columns_;
      loss_[0] =
          0.5 * static_cast<double>(arma::accu(arma::square(residual_))) / static_cast<double>(m_);
      residual_ /= static_cast<T>(m_);
    }
    // dX^T (k x m) = W_r R_:,r^T, summed over the ranks' columns.
    record_multiply(stats, timed_multiply(stats, m_, columns_, k_, [&] {
                      gemm(false, true, k_, m_, columns_, shard.memptr(), k_, residual_.memptr(),
                           m_, input_grad_t_.memptr(), k_);
                    }));
    comm_.allreduce_sum(input_grad_t_);
    // G_r = X^T R_:,r: this rank's columns of the gradient, whole.
    record_multiply(stats, timed_multiply(stats, k_, m_, columns_, [&] {
                      gemm(false, false, k_, columns_, m_, x_all_, k_, residual_.memptr(), m_,
                           gradient_.memptr(), k_);
                    }));
    comm_.allreduce_sum(loss_);
    optimizer_.step(shard, gradient_);
    return loss_[0];
  }
  SavedBlocks<T> saved() override {
    return {with_state(plan_->shard(), optimizer_), plan_->columns(), 0};
  }
  std::uint64_t load(const Checkpoint& checkpoint) override {
    const std::uint64_t read =
        load_own(comm_, checkpoint, plan_->columns(), with_state(plan_->shard(), optimizer_));
    optimizer_.set_steps_taken(checkpoint.meta.step);
    return read;
  }
  arma::Mat<T> gather_parameters() override {
    const bool root = comm_.rank() == root_;
    const std::size_t n = plan_->shape().n;
    arma::Mat<T> w(root ? k_ : 0, root ? n : 0);
    comm_.gatherv(plan_->shard(), w, scaled(shard_counts(n, comm_.size()), k_), root_);
    return w;
  }
  std::size_t data_rows() const override { return m_; }

 private:
  Communicator& comm_;
  int root_;
  std::unique_ptr<TpColPlan<T>> plan_;
  std::size_t m_, k_, columns_;
  arma::Mat<T> x_copy_;
  const T* x_all_;
  arma::Mat<T> t_columns_, residual_, input_grad_t_, gradient_;
  ParameterHold gradient_hold_;
  OptimizerState<T> optimizer_;
  ParameterHold state_hold_;
  std::vector<double> loss_;
};

class TpColStrategy final : public StrategyOf<TpColStrategy> {
 public:
  std::string_view name() const override { return "tp-col"; }
  std::string_view description() const override {
    return "column-parallel tensor parallelism: B sharded by columns, A replicated";
  }
  template <Element T>
  std::unique_ptr<MatmulPlan<T>> make_plan(Communicator& comm, const MatmulShape& shape,
                                           const arma::Mat<T>& b, int root,
                                           const StrategySettings&) const {
    return std::make_unique<TpColPlan<T>>(comm, shape, b, root);
  }
  std::optional<BlockLayout> distributed_blocks(const MatmulShape& shape, int ranks, int rank,
                                                const StrategySettings&) const override {
    return tp_col_blocks(shape, ranks, rank);
  }
  template <Element T>
  std::unique_ptr<DistributedPlan<T>> make_distributed_plan(Communicator& comm,
                                                            const MatmulShape& shape,
                                                            const arma::Mat<T>& b_block,
                                                            const StrategySettings&) const {
    return std::make_unique<TpColDistributedPlan<T>>(comm, shape, b_block);
  }
  template <Element T>
  std::unique_ptr<TrainingStep<T>> make_training_step(const TrainingSetup<T>& setup) const {
    if (setup.comm.size() == 1) return dp_training_step(setup);
    return std::make_unique<TpColStep<T>>(setup);
  }
};

}  // namespace

std::unique_ptr<Strategy> make_tp_col_strategy() {
  return std::make_unique<TpColStrategy>();
}

}  // namespace distmm
