#include "distmm/strategies/fsdp.hpp"

#include <algorithm>

#include "distmm/strategy_of.hpp"
#include "local_multiply.hpp"
#include "strategies/builtin.hpp"
#include "strategies/column_shards.hpp"
#include "strategies/row_distributed.hpp"

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

namespace {

// FSDP's training step: rank r holds only columns shard_of(n, P, r) of W, of its gradient and
// of Adam's state; X by rows. Per step: all-gather W, forward, free W; all-gather W again for
// dX_r = R_r W^T, free W; local G_r = X_r^T R_r; reduce-scatter of G, so each rank receives
// the summed gradient of its own columns; update its shard.
template <Element T>
class FsdpStep final : public TrainingStep<T> {
 public:
  explicit FsdpStep(const TrainingSetup<T>& s)
      : TrainingStep<T>(s.comm),
        comm_(s.comm),
        root_(s.root),
        batch_(s, this->memory()),
        plan_(s.resuming ? std::make_unique<FsdpPlan<T>>(s.comm, s.shape, unplaced, s.root)
                         : std::make_unique<FsdpPlan<T>>(s.comm, s.shape, s.w0, s.root)),
        gradient_shard_(this->memory().template matrix<T>(s.shape.k, plan_->columns().count)),
        gradient_hold_(hold(s.comm, gradient_shard_, true)),
        optimizer_(s.config, s.shape.k, plan_->columns().count, this->memory()),
        state_hold_(s.comm.stats(), optimizer_.bytes(), true),
        local_gradient_(this->memory().template matrix<T>(s.shape.k, s.shape.n)),
        counts_(scaled(shard_counts(s.shape.n, s.comm.size()), s.shape.k)) {
    this->count_plan(*plan_);
    this->count_optimizer_state(optimizer_.bytes());
  }

  double step() override {
    plan_->execute_rows(batch_.x.data, batch_.buffers.residual());  // all-gathers W, multiplies
    const double part = batch_.buffers.residual_from_output(batch_.t.data);
    {
      const arma::Mat<T>& w = plan_->gather();  // again, for the input gradient
      const ParameterHold gathered(comm_.stats(), plan_->gathered_bytes(), false);
      batch_.buffers.input_gradient(w);
    }
    {
      const ParameterHold unsharded = hold(comm_, local_gradient_, false);
      batch_.buffers.weight_gradient(batch_.x.data, local_gradient_);
      comm_.reduce_scatter_sum(local_gradient_, gradient_shard_, counts_);
    }
    const double loss = batch_.buffers.allreduce_loss(part);
    optimizer_.step(plan_->shard(), gradient_shard_);
    return loss;
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
    arma::Mat<T> w(root ? plan_->shape().k : 0, root ? plan_->shape().n : 0);
    comm_.gatherv(plan_->shard(), w, counts_, root_);
    return w;
  }
  std::size_t data_rows() const override { return batch_.rows; }

 private:
  Communicator& comm_;
  int root_;
  RowBatch<T> batch_;
  std::unique_ptr<FsdpPlan<T>> plan_;
  arma::Mat<T> gradient_shard_;
  ParameterHold gradient_hold_;
  OptimizerState<T> optimizer_;
  ParameterHold state_hold_;
  arma::Mat<T> local_gradient_;
  std::vector<std::size_t> counts_;
};

class FsdpStrategy final : public RowShardedStrategy<FsdpStrategy, FsdpPlan> {
 public:
  std::string_view name() const override { return "fsdp"; }
  std::string_view description() const override {
    return "fully sharded data parallel: B sharded by columns, all-gathered for each multiply";
  }
  std::vector<std::pair<std::string, double>> training_report(double psi) const override {
    return {{"zero_bytes_per_step", 3 * psi}};  // ZeRO's accounting: 3 psi per step
  }
  template <Element T>
  std::unique_ptr<MatmulPlan<T>> make_plan(Communicator& comm, const MatmulShape& shape,
                                           const arma::Mat<T>& b, int root,
                                           const StrategySettings&) const {
    return std::make_unique<FsdpPlan<T>>(comm, shape, b, root);
  }
  template <Element T>
  std::unique_ptr<TrainingStep<T>> make_training_step(const TrainingSetup<T>& setup) const {
    if (setup.comm.size() == 1) return dp_training_step(setup);
    return std::make_unique<FsdpStep<T>>(setup);
  }
};

}  // namespace

std::unique_ptr<Strategy> make_fsdp_strategy() {
  return std::make_unique<FsdpStrategy>();
}
template void scatter_column_shards(Communicator&, const MatmulShape&, const arma::Mat<double>&,
                                    arma::Mat<double>&, int);
template void scatter_column_shards(Communicator&, const MatmulShape&, const arma::Mat<float>&,
                                    arma::Mat<float>&, int);

}  // namespace distmm
