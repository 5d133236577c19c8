#include "distmm/strategies/dp.hpp"

#include <algorithm>

#include "distmm/strategies/fsdp.hpp"
#include "distmm/strategy_of.hpp"
#include "local_multiply.hpp"
#include "strategies/builtin.hpp"
#include "strategies/row_distributed.hpp"

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

namespace {

// DP's training step: every rank holds all of W (and its gradient, and Adam's state); X by
// rows. Per step: forward Y_r = X_r W, input gradient dX_r = R_r W^T, local weight gradient
// G_r = X_r^T R_r, all-reduce of G, the same update on every rank.
template <Element T>
class DpStep final : public TrainingStep<T> {
 public:
  explicit DpStep(const TrainingSetup<T>& s)
      : TrainingStep<T>(s.comm),
        comm_(s.comm),
        root_(s.root),
        batch_(s, this->memory()),
        plan_(s.resuming ? std::make_unique<DpPlan<T>>(s.comm, s.shape, unplaced, s.root)
                         : std::make_unique<DpPlan<T>>(s.comm, s.shape, s.w0, s.root)),
        gradient_(this->memory().template matrix<T>(s.shape.k, s.shape.n)),
        gradient_hold_(hold(s.comm, gradient_, true)),
        optimizer_(s.config, s.shape.k, s.shape.n, this->memory()),
        state_hold_(s.comm.stats(), optimizer_.bytes(), true),
        share_(shard_of(s.shape.n, s.comm.size(), s.comm.rank())) {
    this->count_plan(*plan_);
    this->count_optimizer_state(optimizer_.bytes());
  }

  double step() override {
    arma::Mat<T>& w = plan_->parameters();
    plan_->execute_rows(batch_.x.data, batch_.buffers.residual());
    const double part = batch_.buffers.residual_from_output(batch_.t.data);
    batch_.buffers.input_gradient(w);
    batch_.buffers.weight_gradient(batch_.x.data, gradient_);
    if (comm_.size() > 1) comm_.allreduce_sum(gradient_);
    const double loss = batch_.buffers.allreduce_loss(part);
    optimizer_.step(w, gradient_);
    return loss;
  }
  // Each rank saves its share of the columns of the replica (with one rank, all of them).
  SavedBlocks<T> saved() override {
    return {with_state(plan_->parameters(), optimizer_), share_, share_.offset};
  }
  // Each rank reads its share; the all-gather completes every replica.
  std::uint64_t load(const Checkpoint& checkpoint) override {
    const std::uint64_t read = load_replicated(
        comm_, comm_, checkpoint, share_, with_state(plan_->parameters(), optimizer_),
        scaled(shard_counts(plan_->shape().n, comm_.size()), plan_->shape().k));
    optimizer_.set_steps_taken(checkpoint.meta.step);
    return read;
  }
  arma::Mat<T> gather_parameters() override {
    return comm_.rank() == root_ ? plan_->parameters() : arma::Mat<T>();
  }
  std::size_t data_rows() const override { return batch_.rows; }

 private:
  Communicator& comm_;
  int root_;
  RowBatch<T> batch_;
  std::unique_ptr<DpPlan<T>> plan_;
  arma::Mat<T> gradient_;
  ParameterHold gradient_hold_;
  OptimizerState<T> optimizer_;
  ParameterHold state_hold_;
  Shard share_;
};

// Distributed, no rank holds B before an execution: each gathers it from the column blocks,
// as fsdp does.
class DpStrategy final : public RowShardedStrategy<DpStrategy, FsdpPlan> {
 public:
  std::string_view name() const override { return "dp"; }
  std::string_view description() const override {
    return "data parallel: every rank holds all of B, A's rows are sharded";
  }
  std::vector<std::pair<std::string, double>> training_report(double psi) const override {
    return {{"zero_bytes_per_step", 2 * psi}};  // ZeRO's accounting: 2 psi per step
  }
  template <Element T>
  std::unique_ptr<MatmulPlan<T>> make_plan(Communicator& comm, const MatmulShape& shape,
                                           const arma::Mat<T>& b, int root,
                                           const StrategySettings&) const {
    return std::make_unique<DpPlan<T>>(comm, shape, b, root);
  }
  template <Element T>
  std::unique_ptr<TrainingStep<T>> make_training_step(const TrainingSetup<T>& setup) const {
    return dp_training_step(setup);
  }
};

}  // namespace

template <Element T>
std::unique_ptr<TrainingStep<T>> dp_training_step(const TrainingSetup<T>& setup) {
  return std::make_unique<DpStep<T>>(setup);
}
template std::unique_ptr<TrainingStep<double>> dp_training_step(const TrainingSetup<double>&);
template std::unique_ptr<TrainingStep<float>> dp_training_step(const TrainingSetup<float>&);

std::unique_ptr<Strategy> make_dp_strategy() {
  return std::make_unique<DpStrategy>();
}

}  // namespace distmm
